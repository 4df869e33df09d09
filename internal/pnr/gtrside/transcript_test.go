package gtrside

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/cellpay/cellpay/internal/dev/testutil/golden"
	"github.com/cellpay/cellpay/pkg/api/cellpayv1"
)

var rewrite = flag.Bool("rewrite", false, "rewrite the transcripts in testdata/ with the actions the machine takes now")

// base is the transcripts' time zero: at= and cancel-at= are offsets from it.
var base = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

// TestTranscripts replays every testdata/*.txt file. Lines starting with
// "> " are commands (start, or an event with its arguments); the line
// after each is the action the machine returned. Lines starting with "#"
// and blank lines are kept as they are. With -rewrite the files are
// regenerated; review the diff before committing it.
func TestTranscripts(t *testing.T) {
	golden.Transcripts(t, "testdata/*.txt", *rewrite, "rewrite", runTranscript)
}

func runTranscript(t *testing.T, script string) string {
	var out strings.Builder
	var m *Machine
	sc := bufio.NewScanner(strings.NewReader(script))
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "> ") && !strings.HasPrefix(line, "#") && line != "" {
			continue // an output line: regenerated below
		}
		out.WriteString(line + "\n")
		if !strings.HasPrefix(line, "> ") {
			continue
		}
		fields := strings.Fields(strings.TrimPrefix(line, "> "))
		cmd, args := fields[0], kv(fields[1:])
		var a Action
		switch cmd {
		case "start":
			cfg := Config{CellID: "c1", AttemptTimeout: 300 * time.Millisecond}
			if v, ok := args["cell"]; ok {
				cfg.CellID = v
			}
			if v, ok := args["timeout"]; ok {
				cfg.AttemptTimeout = duration(t, v)
			}
			m = New(cfg)
			a = m.Start(at(t, args))
		default:
			if m == nil {
				t.Fatalf("%q before start", line)
			}
			a = m.Step(parseEvent(t, cmd, args))
		}
		out.WriteString(formatAction(a) + "\n")
	}
	return out.String()
}

func kv(fields []string) map[string]string {
	m := map[string]string{}
	for _, f := range fields {
		k, v, _ := strings.Cut(f, "=")
		m[k] = v
	}
	return m
}

func duration(t *testing.T, s string) time.Duration {
	d, err := time.ParseDuration(s)
	if err != nil {
		t.Fatalf("bad duration %q", s)
	}
	return d
}

// at is the event's time: base plus its at= offset (0 when absent).
func at(t *testing.T, args map[string]string) time.Time {
	if v, ok := args["at"]; ok {
		return base.Add(duration(t, v))
	}
	return base
}

// streamErr is the error named by err= in a transcript: what a stream's
// Send or Recv returns in grpc-go.
func streamErr(t *testing.T, name string) error {
	switch name {
	case "eof":
		return io.EOF
	case "canceled":
		return status.Error(codes.Canceled, "context canceled")
	case "unavailable":
		return status.Error(codes.Unavailable, "connection refused")
	case "internal":
		return status.Error(codes.Internal, "store: connection reset")
	case "invalid-argument":
		return status.Error(codes.InvalidArgument, "amount: must be positive")
	case "already-exists":
		return status.Error(codes.AlreadyExists, "transaction_id: already used with a different payload")
	case "aborted":
		return status.Error(codes.Aborted, "another attempt holds the transaction")
	}
	t.Fatalf("unknown error %q", name)
	return nil
}

func parseEvent(t *testing.T, name string, args map[string]string) Event {
	switch name {
	case "opened":
		return Opened{Now: at(t, args)}
	case "open-failed":
		return OpenFailed{Err: streamErr(t, args["err"])}
	case "pnr":
		return PNR{Now: at(t, args)}
	case "result":
		st := cellpayv1.TransactionStatus(cellpayv1.TransactionStatus_value[args["status"]])
		return Result{Now: at(t, args), Txn: &cellpayv1.Transaction{TransactionId: "t-1", Status: st, CellId: "c1"}}
	case "reroutable":
		return Reroutable{Now: at(t, args), Reason: strings.ReplaceAll(args["reason"], "_", " "), CellHealthy: args["healthy"] == "true"}
	case "stream-ended":
		return StreamEnded{Now: at(t, args), Err: streamErr(t, args["err"])}
	case "caller-gone":
		return CallerGone{}
	case "disarmed":
		return Disarmed{}
	case "disarm-failed":
		return DisarmFailed{Timer: args["by"] == "timer"}
	case "proceed-sent":
		return ProceedSent{Now: at(t, args)}
	case "proceed-failed":
		return ProceedFailed{Err: streamErr(t, args["err"])}
	case "released":
		return Released{}
	case "proceeding":
		return Proceeding{}
	}
	t.Fatalf("unknown event %q", name)
	return nil
}

func formatAction(a Action) string {
	switch a := a.(type) {
	case Open:
		return "Open cancel-at=" + a.CancelAt.Sub(base).String()
	case Read:
		return "Read"
	case Disarm:
		return "Disarm"
	case SendProceed:
		return "SendProceed"
	case ReleaseSlot:
		return "ReleaseSlot latency=" + a.Latency.String()
	case Answer:
		return formatAnswer(a)
	}
	return fmt.Sprintf("unknown action %T", a)
}

func formatAnswer(a Answer) string {
	s := "Answer"
	switch {
	case a.Txn != nil:
		s += " txn=" + a.Txn.GetStatus().String()
	case a.Pending:
		s += " PENDING"
	case a.Unknown:
		s += " UNKNOWN"
	case a.Final != nil:
		s += fmt.Sprintf(" final=%s %q", status.Code(a.Final), status.Convert(a.Final).Message())
	case a.Reroute != nil:
		s += " reroute=" + strconv.Quote(a.Reroute.Error())
	}
	for _, f := range []struct {
		on   bool
		name string
	}{{a.CellHealthy, "cell-healthy"}, {a.Slow, "slow"}, {a.Gone, "gone"}, {a.Released, "released"}, {a.Detach, "detach"}} {
		if f.on {
			s += " " + f.name
		}
	}
	return s
}

// TestTranscriptErrorsUnwrap: the reasons the machine gives keep the
// stream's error, so that the gRPC code survives in the GTR's metrics.
func TestTranscriptErrorsUnwrap(t *testing.T) {
	m := New(Config{CellID: "c1", AttemptTimeout: time.Second})
	m.Start(base)
	m.Step(Opened{Now: base})
	want := status.Error(codes.Unavailable, "down")
	a, _ := m.Step(StreamEnded{Now: base, Err: want}).(Answer)
	if !errors.Is(a.Reroute, want) {
		t.Fatalf("reroute %v does not wrap %v", a.Reroute, want)
	}
}
