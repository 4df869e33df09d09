package gtrside

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/cellpay/cellpay/pkg/api/cellpayv1"
)

// FuzzSteps feeds the machine arbitrary event sequences, in and out of
// turn, at arbitrary (monotonic) times, and checks the rules the machine
// exists for:
//   - never Proceed for an attempt given up: SendProceed only answers a
//     Disarmed that followed a PNR seen before the deadline, with the
//     caller still there;
//   - once Proceed was sent, never a re-route but on the cell's own
//     Reroutable before it said Proceeding, never PENDING before it said
//     Proceeding, nothing but PENDING or a result after, and never a
//     cancelled stream unless the cell ended it;
//   - exactly one answer: once the machine has answered, it answers the
//     same again whatever it is told; an Answer is well formed (one of
//     Txn, Pending, Unknown, Final, Reroute; Slow and CellHealthy only with
//     Reroute); the slots are given back once, at the PNR, and the answer
//     says so;
//   - a stream that ends, or a result, read while reading is answered.
//
// Each input byte is one event: its low four bits choose it (12 to 15:
// the ordinary answer to the last action, so that runs get past the
// handshake), its high four bits advance the clock by that many 25ms.
func FuzzSteps(f *testing.F) {
	f.Add([]byte{0x0c, 0x1c, 0x0c, 0x0c, 0x0c, 0x23})                   // approve
	f.Add([]byte{0x0c, 0xf5, 0x05})                                     // timer before PNR
	f.Add([]byte{0x0c, 0xfc})                                           // PNR after the deadline
	f.Add([]byte{0x0c, 0x1c, 0x08})                                     // timer fires while disarming
	f.Add([]byte{0x0c, 0x06, 0x1c})                                     // caller gone, then PNR
	f.Add([]byte{0x0c, 0x1c, 0x0c, 0x0c, 0x0c, 0x06, 0x06, 0x03})       // caller gone after Proceed
	f.Add([]byte{0x0c, 0x1c, 0x0c, 0x0c, 0x0c, 0x05, 0x04})             // stream broken after Proceed
	f.Add([]byte{0x0c, 0x1c, 0x0c, 0x0c, 0x0c, 0x0b, 0x05})             // stream broken after Proceeding
	f.Add([]byte{0x0c, 0x1c, 0x0c, 0x0c, 0x0c, 0x04})                   // re-routable after Proceed: a late Proceed
	f.Add([]byte{0x0c, 0x1c, 0x0c, 0x0c, 0x0c, 0x0b, 0x04})             // re-routable after Proceeding
	f.Add([]byte{0x0c, 0x04, 0x0c})                                     // re-routable
	f.Add([]byte{0x0c, 0x1c, 0x07, 0x0c, 0x0c, 0x0b, 0x0c, 0x0c, 0x09}) // driver bugs
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > 64 {
			return
		}
		checkSteps(t, data)
	})
}

func checkSteps(t *testing.T, data []byte) {
	const timeout = 300 * time.Millisecond
	now := base
	deadline := base.Add(timeout)
	m := New(Config{CellID: "c1", AttemptTimeout: timeout})
	a := m.Start(now)
	var trace []string
	fail := func(format string, args ...any) {
		t.Helper()
		t.Fatalf("%s\ntrace:\n  %s", fmt.Sprintf(format, args...), strings.Join(trace, "\n  "))
	}
	var (
		answer      *Answer
		gone        bool
		pnrInTime   bool // the last PNR came before the deadline
		proceeded   bool // ProceedSent answered SendProceed
		taken       bool // Proceeding read after Proceed
		releases    int
		releasedAck bool
	)
	for _, b := range data {
		now = now.Add(time.Duration(b>>4) * 25 * time.Millisecond)
		ev := fuzzEvent(b&0x0f, a, now)
		prev := a
		a = m.Step(ev)
		trace = append(trace, fmt.Sprintf("%s@%v -> %s", name(ev), now.Sub(base), formatAction(a)))

		if answer != nil {
			if got, ok := a.(Answer); !ok || describe(got) != describe(*answer) {
				fail("a second, different answer: %s after %s", formatAction(a), formatAnswer(*answer))
			}
			continue
		}
		// What the event tells, as the machine was owed it.
		switch ev := ev.(type) {
		case CallerGone:
			if _, ok := prev.(Read); ok {
				gone = true
			}
		case DisarmFailed:
			if _, ok := prev.(Disarm); ok && !ev.Timer {
				gone = true // the caller's watch fired
			}
		case Proceeding:
			if _, ok := prev.(Read); ok && proceeded {
				taken = true
			}
		case PNR:
			if _, ok := prev.(Read); ok && !proceeded {
				pnrInTime = now.Before(deadline)
			}
		case ProceedSent:
			if _, ok := prev.(SendProceed); ok {
				proceeded = true
			}
		case Released:
			if _, ok := prev.(ReleaseSlot); ok {
				releasedAck = true
			}
		}

		switch act := a.(type) {
		case SendProceed:
			if _, ok := ev.(Disarmed); !ok {
				fail("SendProceed not in answer to Disarmed")
			}
			if gone || !pnrInTime {
				fail("Proceed for an attempt given up (caller gone %v, PNR in time %v)", gone, pnrInTime)
			}
		case Disarm:
			if _, ok := ev.(PNR); !ok || gone || !now.Before(deadline) || proceeded {
				fail("Disarm not for a timely first PNR of a live caller")
			}
		case ReleaseSlot:
			releases++
			if _, ok := ev.(ProceedSent); !ok || releases > 1 {
				fail("ReleaseSlot not once, right after Proceed")
			}
		case Answer:
			answer = &act
			checkAnswer(fail, act, ev, prev, proceeded, taken, releasedAck)
			// A caller who left is never the cell's slowness or failure.
			if act.Gone && !gone || act.Slow && gone {
				fail("answer %s, the caller left: %v", formatAnswer(act), gone)
			}
			// (An event out of turn is a driver's bug, answered as such.)
			_, afterRead := prev.(Read)
			_, afterDisarm := prev.(Disarm)
			inTurn := afterDisarm
			switch ev.(type) {
			case StreamEnded, PNR:
				inTurn = afterRead
			case DisarmFailed:
			default:
				inTurn = false
			}
			if inTurn && gone && act.Reroute != nil && !act.Gone {
				fail("re-route on %s after the caller left, not marked gone", name(ev))
			}
		}
		if _, ok := prev.(Read); ok && answer == nil {
			switch ev.(type) {
			case StreamEnded, Result:
				fail("%s read and not answered", name(ev))
			}
		}
	}
}

func checkAnswer(fail func(string, ...any), a Answer, ev Event, prev Action, proceeded, taken, released bool) {
	set := 0
	for _, on := range []bool{a.Txn != nil, a.Pending, a.Unknown, a.Final != nil, a.Reroute != nil} {
		if on {
			set++
		}
	}
	if set != 1 {
		fail("answer %s: want exactly one of txn, pending, unknown, final, reroute", formatAnswer(a))
	}
	_, sending := prev.(SendProceed) // the Proceed may have gone out
	if a.Pending && !proceeded || a.Unknown && !proceeded && !sending {
		fail("answer %s before Proceed", formatAnswer(a))
	}
	if (a.Slow || a.CellHealthy || a.Gone) && a.Reroute == nil {
		fail("slow, gone or cell-healthy without a re-route")
	}
	if a.Slow && a.Gone {
		fail("both slow and gone: the cell is blamed for a caller who left")
	}
	if a.Released != released {
		fail("answer says released=%v, the slots were given back: %v", a.Released, released)
	}
	if proceeded {
		_, read := prev.(Read)
		_, stepBack := ev.(Reroutable)
		switch {
		case a.Final != nil:
			fail("an error for the caller after Proceed: %s", formatAnswer(a))
		case a.Reroute != nil && (taken || !stepBack || !read):
			fail("re-route after Proceed but on the cell's step back before Proceeding: %s on %s", formatAnswer(a), name(ev))
		case a.Pending && !taken:
			fail("PENDING before the cell said Proceeding: %s", formatAnswer(a))
		case a.Unknown && taken:
			fail("outcome unknown after the cell said Proceeding: %s", formatAnswer(a))
		}
		streamOver := false
		switch ev.(type) {
		case Result, StreamEnded, Reroutable:
			streamOver = read
		}
		if !a.Detach && !streamOver && a.Reroute == nil {
			fail("the stream would be cancelled after Proceed: %s on %s", formatAnswer(a), name(ev))
		}
	}
}

// fuzzEvent builds event k at now; 12 to 15 are the ordinary answer to a.
func fuzzEvent(k byte, a Action, now time.Time) Event {
	if k >= 12 {
		switch a.(type) {
		case Open:
			return Opened{Now: now}
		case Read:
			return PNR{Now: now}
		case Disarm:
			return Disarmed{}
		case SendProceed:
			return ProceedSent{Now: now}
		case ReleaseSlot:
			return Released{}
		}
		return Result{Now: now, Txn: &cellpayv1.Transaction{Status: cellpayv1.TransactionStatus_APPROVED}}
	}
	switch k {
	case 0:
		return Opened{Now: now}
	case 1:
		return OpenFailed{Err: errors.New("dial")}
	case 2:
		return PNR{Now: now}
	case 3:
		return Result{Now: now, Txn: &cellpayv1.Transaction{Status: cellpayv1.TransactionStatus_APPROVED}}
	case 4:
		return Reroutable{Now: now, Reason: "db down", CellHealthy: now.UnixMilli()%2 == 0}
	case 5:
		return StreamEnded{Now: now, Err: status.Error(codes.Canceled, "x")}
	case 6:
		return CallerGone{}
	case 7:
		return Disarmed{}
	case 8:
		return DisarmFailed{Timer: now.UnixMilli()%2 == 0}
	case 9:
		return ProceedSent{Now: now}
	case 10:
		return ProceedFailed{Err: io.EOF}
	case 11:
		if now.UnixMilli()%50 == 0 {
			return Proceeding{}
		}
	}
	return Released{}
}
