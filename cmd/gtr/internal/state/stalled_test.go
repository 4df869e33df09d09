package state

import (
	"testing"
	"time"
)

// TestRampStalled: with the compiler refreshing, a ramp never reads as
// stalled; with it stopped, the stall is the time since the step the table
// missed; an ejected cell (weight 0 whatever the ramp) whose table Refresh
// finds unchanged is not stalled; no ramp, none.
func TestRampStalled(t *testing.T) {
	s, clk, h := newStateH(t)
	stalled := func(id string) time.Duration {
		t.Helper()
		d, _, _ := s.Doc()
		return d.Cell(id).RampStalled(s.Checked(), clk.Now())
	}
	if got := stalled("cell-a"); got != 0 {
		t.Fatalf("no ramp: stalled %v", got)
	}
	d, rev, _ := s.Doc()
	// 100 to 0 over 100 s: a step a second.
	if err := d.Drain("cell-b", 100, clk.Now(), 100*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := s.Apply(d, rev+1); err != nil {
		t.Fatal(err)
	}
	for range 5 { // the compiler keeps up
		clk.Add(1500 * time.Millisecond)
		s.Refresh()
		if got := stalled("cell-b"); got != 0 {
			t.Fatalf("refreshed: stalled %v", got)
		}
	}
	// Between steps, nothing is missed; then the compiler stops.
	clk.Add(300 * time.Millisecond) // 7.8 s in: the next step is at 8 s
	if got := stalled("cell-b"); got != 0 {
		t.Fatalf("before the next step: stalled %v", got)
	}
	clk.Add(10*time.Second + 200*time.Millisecond) // 18 s in
	if got := stalled("cell-b"); got != 10*time.Second {
		t.Fatalf("compiler stopped at 7.8 s, now 18 s: stalled %v, want 10s (since the 8 s step)", got)
	}
	s.Refresh()
	if got := stalled("cell-b"); got != 0 {
		t.Fatalf("refreshed again: stalled %v", got)
	}
	// Ejected: the table's weight is 0 whatever the ramp's; Refresh finds
	// nothing moved and the ramp is not stalled for it.
	h.set(s, "cell-b", 0)
	for range 3 {
		clk.Add(5 * time.Second)
		s.Refresh()
		if got := stalled("cell-b"); got != 0 {
			t.Fatalf("ejected and refreshed: stalled %v", got)
		}
	}
	// After the ramp's end, a table that missed the last step is stalled.
	h.set(s, "cell-b", 100)
	clk.Add(time.Hour)
	if got := stalled("cell-b"); got <= time.Hour-100*time.Second {
		t.Fatalf("an hour after the ramp's end, not refreshed: stalled %v", got)
	}
}
