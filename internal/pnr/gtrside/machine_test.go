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

const timeout = 300 * time.Millisecond

func ms(n int) time.Time { return base.Add(time.Duration(n) * time.Millisecond) }

// handshake is the events of a stream opened at 1ms whose PNR comes at
// 10ms and is confirmed at 11ms; taken adds the cell's Proceeding.
var (
	handshake = []Event{Opened{Now: ms(1)}, PNR{Now: ms(10)}, Disarmed{}, ProceedSent{Now: ms(11)}, Released{}}
	taken     = append(append([]Event(nil), handshake...), Proceeding{})
)

// with is the handshake, Proceeding said, then events; unsaid, the
// handshake without the Proceeding.
func with(events ...Event) []Event   { return append(append([]Event(nil), taken...), events...) }
func unsaid(events ...Event) []Event { return append(append([]Event(nil), handshake...), events...) }

// run starts a machine at base and feeds it events, returning every action.
func run(events []Event) []Action {
	m := New(Config{CellID: "c1", AttemptTimeout: timeout})
	actions := []Action{m.Start(base)}
	for _, ev := range events {
		actions = append(actions, m.Step(ev))
	}
	return actions
}

func TestAttempt(t *testing.T) {
	approved := &cellpayv1.Transaction{Status: cellpayv1.TransactionStatus_APPROVED}
	unavailable := status.Error(codes.Unavailable, "down")
	cases := []struct {
		name   string
		events []Event
		want   Answer
		// proceed: SendProceed is among the actions.
		proceed bool
	}{
		{"approve", with(Result{Now: ms(40), Txn: approved}), Answer{Txn: approved, Released: true}, true},
		{"result after the timer, past Proceed", with(Result{Now: ms(900), Txn: approved}), Answer{Txn: approved, Released: true}, true},
		{"answer before any PNR", []Event{Opened{Now: ms(1)}, Result{Now: ms(5), Txn: approved}}, Answer{Txn: approved}, false},
		{"timer before PNR", []Event{Opened{Now: ms(1)}, StreamEnded{Now: ms(300), Err: status.Error(codes.Canceled, "x")}},
			Answer{Reroute: errors.New("cell c1: rpc error: code = Canceled desc = x"), Slow: true}, false},
		{"PNR after the deadline", []Event{Opened{Now: ms(1)}, PNR{Now: ms(300)}},
			Answer{Reroute: errors.New("cell c1: point of no return after the attempt was given up"), Slow: true}, false},
		{"timer fires while disarming", []Event{Opened{Now: ms(1)}, PNR{Now: ms(299)}, DisarmFailed{Timer: true}},
			Answer{Reroute: errors.New("cell c1: point of no return after the attempt was given up"), Slow: true}, false},
		{"caller's watch fires while disarming", []Event{Opened{Now: ms(1)}, PNR{Now: ms(299)}, DisarmFailed{}},
			Answer{Reroute: errors.New("cell c1: point of no return after the attempt was given up"), Gone: true}, false},
		{"caller gone before PNR", []Event{Opened{Now: ms(1)}, CallerGone{}, StreamEnded{Now: ms(301), Err: status.Error(codes.Canceled, "x")}},
			Answer{Reroute: errors.New("cell c1: rpc error: code = Canceled desc = x"), Gone: true}, false},
		{"caller gone, then PNR", []Event{Opened{Now: ms(1)}, CallerGone{}, PNR{Now: ms(5)}},
			Answer{Reroute: errors.New("cell c1: point of no return after the attempt was given up"), Gone: true}, false},
		{"caller gone after Proceeding", with(CallerGone{}), Answer{Pending: true, Released: true, Detach: true}, true},
		{"caller gone after Proceed, before Proceeding", unsaid(CallerGone{}), Answer{Unknown: true, Released: true, Detach: true}, true},
		{"stream broken before PNR", []Event{Opened{Now: ms(1)}, StreamEnded{Now: ms(5), Err: unavailable}},
			Answer{Reroute: errors.New("cell c1: rpc error: code = Unavailable desc = down")}, false},
		{"stream closed without outcome", []Event{Opened{Now: ms(1)}, StreamEnded{Now: ms(5), Err: io.EOF}},
			Answer{Reroute: errors.New("cell c1: cell closed the stream without an outcome")}, false},
		{"stream broken after Proceeding", with(StreamEnded{Now: ms(50), Err: unavailable}), Answer{Pending: true, Released: true}, true},
		{"stream broken after Proceed, before Proceeding", unsaid(StreamEnded{Now: ms(50), Err: unavailable}), Answer{Unknown: true, Released: true}, true},
		{"re-routable", []Event{Opened{Now: ms(1)}, Reroutable{Now: ms(5), Reason: "db down"}},
			Answer{Reroute: errors.New("cell c1: db down")}, false},
		{"re-routable, cell healthy", []Event{Opened{Now: ms(1)}, Reroutable{Now: ms(5), Reason: "abandoned", CellHealthy: true}},
			Answer{Reroute: errors.New("cell c1: abandoned"), CellHealthy: true}, false},
		{"re-routable after Proceeding", with(Reroutable{Now: ms(50), Reason: "db down"}), Answer{Pending: true, Released: true}, true},
		// The cell stopped waiting before the Proceed reached it, and
		// stepped back without calling the issuer.
		{"re-routable after Proceed, before Proceeding", unsaid(Reroutable{Now: ms(5050), Reason: "point of no return not confirmed"}),
			Answer{Reroute: errors.New("cell c1: point of no return not confirmed"), Released: true}, true},
		{"cell error", []Event{Opened{Now: ms(1)}, StreamEnded{Now: ms(5), Err: status.Error(codes.AlreadyExists, "other payload")}},
			Answer{Final: status.Error(codes.AlreadyExists, "other payload")}, false},
		{"open fails", []Event{OpenFailed{Err: unavailable}}, Answer{Reroute: unavailable}, false},
		{"Proceed not delivered", []Event{Opened{Now: ms(1)}, PNR{Now: ms(10)}, Disarmed{}, ProceedFailed{Err: io.EOF}},
			Answer{Reroute: errors.New("cell c1: confirming the point of no return: EOF")}, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			actions := run(c.events)
			last, ok := actions[len(actions)-1].(Answer)
			if !ok {
				t.Fatalf("last action %#v, want an Answer", actions[len(actions)-1])
			}
			if got, want := describe(last), describe(c.want); got != want {
				t.Errorf("answer\n  %s\nwant\n  %s", got, want)
			}
			proceeded := false
			for _, a := range actions[:len(actions)-1] {
				if Done(a) {
					t.Fatalf("an Answer before the last event: %v", actions)
				}
				_, p := a.(SendProceed)
				proceeded = proceeded || p
			}
			if proceeded != c.proceed {
				t.Errorf("SendProceed among the actions: %v, want %v", proceeded, c.proceed)
			}
		})
	}
}

// describe is an Answer with its errors as text, to compare.
func describe(a Answer) string {
	s := formatAnswer(a)
	if a.Txn != nil {
		s += fmt.Sprintf(" %p", a.Txn)
	}
	return s
}

// TestReleaseLatency: the latency given back at the PNR runs from the
// stream's opening to the Proceed, whatever the clock's zone.
func TestReleaseLatency(t *testing.T) {
	m := New(Config{CellID: "c1", AttemptTimeout: timeout})
	m.Start(base)
	m.Step(Opened{Now: ms(3).In(time.FixedZone("x", 3600))})
	m.Step(PNR{Now: ms(40)})
	m.Step(Disarmed{})
	a, ok := m.Step(ProceedSent{Now: ms(45)}).(ReleaseSlot)
	if !ok || a.Latency != 42*time.Millisecond {
		t.Fatalf("got %#v, want ReleaseSlot of 42ms", a)
	}
	if !m.Proceeded() {
		t.Fatal("Proceeded() is false after ProceedSent")
	}
}

// TestAllocations: the handshake of an approved attempt allocates only the
// actions that carry data (Open, ReleaseSlot, Answer); events passed to
// Step stay on the driver's stack.
func TestAllocations(t *testing.T) {
	txn := &cellpayv1.Transaction{}
	allocs := testing.AllocsPerRun(100, func() {
		m := New(Config{CellID: "c1", AttemptTimeout: timeout})
		m.Start(base)
		m.Step(Opened{Now: ms(1)})
		m.Step(PNR{Now: ms(10)})
		m.Step(Disarmed{})
		m.Step(ProceedSent{Now: ms(11)})
		m.Step(Released{})
		m.Step(Result{Now: ms(40), Txn: txn})
	})
	if allocs > 3 {
		t.Fatalf("%v allocations per attempt, want at most 3", allocs)
	}
}

func TestStartTwice(t *testing.T) {
	m := New(Config{CellID: "c1", AttemptTimeout: timeout})
	m.Start(base)
	a, ok := m.Start(base).(Answer)
	if !ok || a.Reroute == nil || !strings.Contains(a.Reroute.Error(), "Start called in phase open") {
		t.Fatalf("second Start: %#v", a)
	}
}
