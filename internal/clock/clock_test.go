package clock

import (
	"testing"
	"time"
)

func TestVirtualRunsTimersInDeadlineOrder(t *testing.T) {
	start := time.Unix(1000, 0)
	v := NewVirtual(start)
	var got []string
	v.AfterFunc(3*time.Second, func() { got = append(got, "c") })
	v.AfterFunc(time.Second, func() {
		got = append(got, "a")
		if !v.Now().Equal(start.Add(time.Second)) {
			t.Errorf("Now inside callback = %v, want deadline", v.Now())
		}
		// A timer scheduled from a callback that falls due within the same
		// Advance runs in the same call.
		v.AfterFunc(time.Second, func() { got = append(got, "b") })
	})
	stopped := v.AfterFunc(2500*time.Millisecond, func() { got = append(got, "never") })
	if !stopped.Stop() {
		t.Fatal("Stop on a pending timer returned false")
	}
	v.Advance(2 * time.Second)
	if want := "ab"; join(got) != want {
		t.Fatalf("after 2s ran %q, want %q", join(got), want)
	}
	v.Advance(time.Second)
	if want := "abc"; join(got) != want {
		t.Fatalf("after 3s ran %q, want %q", join(got), want)
	}
	if stopped.Stop() {
		t.Fatal("second Stop returned true")
	}
	if !v.Now().Equal(start.Add(3 * time.Second)) {
		t.Fatalf("Now = %v", v.Now())
	}
}

func join(s []string) string {
	out := ""
	for _, x := range s {
		out += x
	}
	return out
}
