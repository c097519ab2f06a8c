package ledger_test

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"quire/internal/ledger"
)

func TestValidateQuorum(t *testing.T) {
	for _, tc := range []struct {
		ensemble, writeQuorum, ackQuorum int
		ok                               bool
	}{
		{3, 3, 2, true},
		{5, 3, 2, true},
		{3, 3, 3, true},
		{1, 1, 1, true},
		{2, 3, 2, false}, // ensemble smaller than the write quorum
		{3, 2, 3, false}, // ack quorum larger than the write quorum
		{3, 3, 0, false}, // nothing would ever need acknowledging
		{0, 0, 0, false},
		{3, 3, -1, false},
		{-3, 3, 2, false},
	} {
		name := fmt.Sprintf("E=%d Qw=%d Qa=%d", tc.ensemble, tc.writeQuorum, tc.ackQuorum)
		t.Run(name, func(t *testing.T) {
			err := ledger.ValidateQuorum(tc.ensemble, tc.writeQuorum, tc.ackQuorum)
			if tc.ok {
				if err != nil {
					t.Fatalf("got %v, want nil", err)
				}
				return
			}
			if !errors.Is(err, ledger.ErrBadQuorum) {
				t.Fatalf("got %v, want ErrBadQuorum", err)
			}
			// The message must name the rule and the values that broke it.
			for _, want := range []string{"ensemble ≥ write quorum ≥ ack quorum ≥ 1", "(got " + name + ")"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not mention %q", err, want)
				}
			}
		})
	}
}

func validMetadata() ledger.Metadata {
	return ledger.Metadata{
		ID: 4, EnsembleSize: 3, WriteQuorum: 3, AckQuorum: 2, State: ledger.StateOpen, LastEntryID: -1,
		Fragments: []ledger.Fragment{
			{FirstEntry: 0, Ensemble: []ledger.BookieID{"b1", "b2", "b3"}},
			{FirstEntry: 7, Ensemble: []ledger.BookieID{"b1", "b4", "b3"}},
		},
	}
}

func TestMetadataValidate(t *testing.T) {
	for _, tc := range []struct {
		name   string
		mutate func(*ledger.Metadata)
		want   string // substring of the error; "" for valid
	}{
		{"valid", func(*ledger.Metadata) {}, ""},
		{"bad quorum", func(m *ledger.Metadata) { m.AckQuorum = 4 }, "quorum sizes"},
		{"unknown state", func(m *ledger.Metadata) { m.State = "DELETED" }, `unknown state "DELETED"`},
		{"no fragments", func(m *ledger.Metadata) { m.Fragments = nil }, "no fragments"},
		{"short ensemble", func(m *ledger.Metadata) { m.Fragments[1].Ensemble = m.Fragments[1].Ensemble[:2] }, "fragment 1 has 2 bookies, want 3"},
		{"first fragment not at 0", func(m *ledger.Metadata) { m.Fragments[0].FirstEntry = 1 }, "fragment 0 starts at 1"},
		{"fragments out of order", func(m *ledger.Metadata) { m.Fragments[1].FirstEntry = 0 }, "fragment 1 starts at 0"},
		{"bookie twice", func(m *ledger.Metadata) { m.Fragments[1].Ensemble[1] = "b1" }, "lists bookie b1 twice"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := validMetadata()
			tc.mutate(&m)
			err := m.Validate()
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("got %v, want nil", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("got %v, want an error containing %q", err, tc.want)
			}
			// The store round trip validates too.
			_, err2 := ledger.UnmarshalMetadata(m.Marshal())
			if (err == nil) != (err2 == nil) {
				t.Fatalf("Validate: %v; UnmarshalMetadata: %v", err, err2)
			}
		})
	}
}

func TestMetadataRoundTripAndClone(t *testing.T) {
	m := validMetadata()
	m.State, m.LastEntryID, m.Length = ledger.StateClosed, 9, 120
	got, err := ledger.UnmarshalMetadata(m.Marshal())
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, m) {
		t.Fatalf("round trip: got %+v, want %+v", got, m)
	}
	c := m.Clone()
	c.Fragments[0].Ensemble[0] = "zz"
	if m.Fragments[0].Ensemble[0] != "b1" {
		t.Fatal("Clone shares ensembles with the original")
	}
}

func TestWriteSetStriping(t *testing.T) {
	for _, tc := range []struct {
		entry                     int64
		ensembleSize, writeQuorum int
		want                      []int
	}{
		{0, 5, 3, []int{0, 1, 2}},
		{1, 5, 3, []int{1, 2, 3}},
		{3, 5, 3, []int{3, 4, 0}},
		{4, 5, 3, []int{4, 0, 1}},
		{7, 5, 3, []int{2, 3, 4}},
		{7, 3, 3, []int{1, 2, 0}},
		{6, 3, 2, []int{0, 1}},
		{9, 1, 1, []int{0}},
		{1 << 40, 5, 3, []int{1, 2, 3}}, // 2^40 mod 5 = 1
	} {
		got := ledger.WriteSet(tc.entry, tc.ensembleSize, tc.writeQuorum)
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("WriteSet(%d, E=%d, Qw=%d) = %v, want %v", tc.entry, tc.ensembleSize, tc.writeQuorum, got, tc.want)
		}
	}
	// Over any E consecutive entries every member stores exactly Qw of them
	// (3 of every 5 for E=5, Qw=3), and a write quorum never repeats a member.
	for ensembleSize := 1; ensembleSize <= 6; ensembleSize++ {
		for writeQuorum := 1; writeQuorum <= ensembleSize; writeQuorum++ {
			for start := int64(0); start < 12; start++ {
				count := make([]int, ensembleSize)
				for e := start; e < start+int64(ensembleSize); e++ {
					seen := map[int]bool{}
					for _, i := range ledger.WriteSet(e, ensembleSize, writeQuorum) {
						if seen[i] {
							t.Fatalf("E=%d Qw=%d entry %d: member %d twice", ensembleSize, writeQuorum, e, i)
						}
						seen[i] = true
						count[i]++
					}
				}
				for i, n := range count {
					if n != writeQuorum {
						t.Fatalf("E=%d Qw=%d entries %d..%d: member %d stores %d, want %d", ensembleSize, writeQuorum, start, start+int64(ensembleSize)-1, i, n, writeQuorum)
					}
				}
			}
		}
	}
}

func TestWriteQuorumBookiesFollowFragments(t *testing.T) {
	m := validMetadata()
	for _, tc := range []struct {
		entry int64
		want  []ledger.BookieID
	}{
		{0, []ledger.BookieID{"b1", "b2", "b3"}},
		{6, []ledger.BookieID{"b1", "b2", "b3"}},
		{7, []ledger.BookieID{"b4", "b3", "b1"}}, // second fragment, members 1,2,0 of (b1,b4,b3)
	} {
		if got := m.WriteQuorumBookies(tc.entry); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("WriteQuorumBookies(%d) = %v, want %v", tc.entry, got, tc.want)
		}
	}
	if got := m.FragmentFor(100); got != 1 {
		t.Errorf("FragmentFor(100) = %d, want 1", got)
	}
}
