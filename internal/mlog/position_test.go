package mlog

import (
	"math"
	"slices"
	"testing"
)

func TestPositionOrder(t *testing.T) {
	tests := []struct {
		p, q Position
		want int
	}{
		{Position{1, 5}, Position{1, 5}, 0},
		{Position{1, 5}, Position{1, 6}, -1},
		{Position{1, 6}, Position{1, 5}, 1},
		{Position{1, 1000}, Position{2, 0}, -1}, // ledger first
		{Position{2, -1}, Position{1, math.MaxInt64}, 1},
		{BeforeLedger(7), Position{7, 0}, -1},
	}
	for _, tt := range tests {
		if got := tt.p.Compare(tt.q); got != tt.want {
			t.Errorf("%v.Compare(%v) = %d, want %d", tt.p, tt.q, got, tt.want)
		}
		if got := tt.p.Less(tt.q); got != (tt.want < 0) {
			t.Errorf("%v.Less(%v) = %v", tt.p, tt.q, got)
		}
	}
	ps := []Position{{3, 1}, {1, 9}, {3, 0}, {2, -1}, {1, 10}}
	slices.SortFunc(ps, Position.Compare)
	want := []Position{{1, 9}, {1, 10}, {2, -1}, {3, 0}, {3, 1}}
	if !slices.Equal(ps, want) {
		t.Errorf("sorted %v, want %v", ps, want)
	}
}

func TestPositionString(t *testing.T) {
	for _, tt := range []struct {
		p    Position
		want string
	}{
		{Position{12, 345}, "12:345"},
		{BeforeLedger(4), "4:-1"},
		{Position{0, 0}, "0:0"},
	} {
		if got := tt.p.String(); got != tt.want {
			t.Errorf("String() = %q, want %q", got, tt.want)
		}
	}
	if got := (Range{Position{3, 7}, Position{9, 2}}).String(); got != "[3:7, 9:2]" {
		t.Errorf("Range.String() = %q", got)
	}
}

func TestSuccessorPredecessor(t *testing.T) {
	tests := []struct {
		p        Position
		succ     Position
		succOK   bool
		pred     Position
		predOK   bool
		adjacent bool // p and succ adjacent in one ledger
	}{
		{Position{1, 5}, Position{1, 6}, true, Position{1, 4}, true, true},
		{Position{1, math.MaxInt64}, Position{2, math.MinInt64}, true, Position{1, math.MaxInt64 - 1}, true, false},
		{Position{1, math.MinInt64}, Position{1, math.MinInt64 + 1}, true, Position{0, math.MaxInt64}, true, true},
		{Position{math.MaxInt64, math.MaxInt64}, Position{}, false, Position{math.MaxInt64, math.MaxInt64 - 1}, true, false},
		{Position{math.MinInt64, math.MinInt64}, Position{math.MinInt64, math.MinInt64 + 1}, true, Position{}, false, true},
	}
	for _, tt := range tests {
		s, ok := successor(tt.p)
		if s != tt.succ || ok != tt.succOK {
			t.Errorf("successor(%v) = %v, %v; want %v, %v", tt.p, s, ok, tt.succ, tt.succOK)
		}
		if ok && adjacentInLedger(tt.p, s) != tt.adjacent {
			t.Errorf("adjacentInLedger(%v, %v) = %v", tt.p, s, !tt.adjacent)
		}
		pr, ok := predecessor(tt.p)
		if pr != tt.pred || ok != tt.predOK {
			t.Errorf("predecessor(%v) = %v, %v; want %v, %v", tt.p, pr, ok, tt.pred, tt.predOK)
		}
	}
}

func TestDenseLedgers(t *testing.T) {
	var d denseLedgers
	if p, ok := d.Next(BeforeLedger(0)); !ok || p != (Position{0, 0}) {
		t.Errorf("Next(0:-1) = %v, %v", p, ok)
	}
	if p, ok := d.Next(Position{0, math.MaxInt64}); ok {
		t.Errorf("Next(0:max) = %v, want none", p)
	}
}
