package cellside

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"google.golang.org/protobuf/proto"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cellpay/cellpay/internal/card"
	"github.com/cellpay/cellpay/internal/dev/testutil/golden"
	"github.com/cellpay/cellpay/internal/refdata"
	"github.com/cellpay/cellpay/pkg/api/cellpayv1"
	"github.com/cellpay/cellpay/pkg/idempotency"
)

var rewrite = flag.Bool("rewrite", false, "rewrite the transcripts in testdata/ with the actions the machine takes now")

// TestTranscripts replays every testdata/*.txt file. Lines starting with
// "> " are commands (request, start, event ...); the lines after each are
// the action the machine returned. With -rewrite the files are regenerated;
// review the diff before committing it.
func TestTranscripts(t *testing.T) {
	golden.Transcripts(t, "testdata/*.txt", *rewrite, "rewrite", runTranscript)
}

var testRef = func() *refdata.Snapshot {
	s, err := refdata.FromFile(refdata.File{
		Version: 1, BaseCurrency: "EUR", DefaultSettlementCurrency: "EUR",
		Partners: map[string]string{"p-001": "GBP"},
		FXRates:  map[string]string{"EUR": "1", "GBP": "0.8412", "USD": "1.0842"},
		MCC: map[string]refdata.MCC{
			"5411": {Category: "grocery", Risk: refdata.RiskLow},
			"5944": {Category: "jewelry", Risk: refdata.RiskHigh},
			"7995": {Category: "betting_gambling", Risk: refdata.RiskHigh},
		},
		BlockedCategories: []string{"betting_gambling"},
	})
	if err != nil {
		panic(err)
	}
	return s
}()

var testPolicy = Policy{
	LimitCurrency:     "EUR",
	MaxAmount:         map[string]int64{refdata.RiskLow: 1_000_000, refdata.RiskHigh: 100_000},
	VelocityWindow:    10 * time.Minute,
	VelocityMaxCount:  5,
	VelocityMaxAmount: 2_000_000,
}

func testRequest() *cellpayv1.SubmitTransactionRequest {
	return &cellpayv1.SubmitTransactionRequest{
		TransactionId: "t-1",
		PaymentType:   cellpayv1.PaymentType_CARD_AUTHORIZATION,
		PartnerId:     "p-001",
		Market:        "GB",
		Amount:        &cellpayv1.Money{MinorUnits: 1250, Currency: "GBP"},
		Merchant:      &cellpayv1.Merchant{Id: "m-1", Mcc: "5411", Country: "GB"},
		Card:          &cellpayv1.Card{Pan: "4242424242424242", ExpiryMonth: 12, ExpiryYear: 2030},
	}
}

// fp is the current fingerprint key, "fp-cur"; oldFP, a previous key the
// cell still has, "fp-old"; goneFP, a key it no longer has, "fp-gone".
var (
	fp     = idempotency.NewFingerprinter([]byte("test-key"))
	oldFP  = idempotency.NewFingerprinter([]byte("old-test-key"))
	goneFP = idempotency.NewFingerprinter([]byte("gone-test-key"))
)

// fingerprintUnder is the transcripts' Input.FingerprintUnder.
func fingerprintUnder(req *cellpayv1.SubmitTransactionRequest) func(string) (idempotency.Fingerprint, bool) {
	return func(keyID string) (idempotency.Fingerprint, bool) {
		switch keyID {
		case "fp-cur":
			return fp.Of(req), true
		case "fp-old":
			return oldFP.Of(req), true
		}
		return idempotency.Fingerprint{}, false
	}
}

// storedFingerprint is the fingerprint of a stored record or entry of
// payload p under the key key= names: cur (the default), old or gone.
func storedFingerprint(t *testing.T, args map[string]string, p *cellpayv1.SubmitTransactionRequest) (string, idempotency.Fingerprint) {
	switch args["key"] {
	case "", "cur":
		return "fp-cur", fp.Of(p)
	case "old":
		return "fp-old", oldFP.Of(p)
	case "gone":
		return "fp-gone", goneFP.Of(p)
	case "recovered":
		return RecoveredKeyID, idempotency.Fingerprint{}
	}
	t.Fatalf("unknown key %q", args["key"])
	return "", idempotency.Fingerprint{}
}

func runTranscript(t *testing.T, script string) string {
	var out strings.Builder
	req := testRequest()
	var m *Machine
	clock := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	now := func() time.Time { clock = clock.Add(time.Millisecond); return clock }
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
		cmd, args := fields[0], kv(t, fields[1:])
		var a Action
		switch cmd {
		case "request":
			applyRequest(t, req, args)
			continue
		case "start":
			var others []card.KeyedHash
			if args["keys"] == "rotated" {
				others = []card.KeyedHash{{KeyID: "pan-old", Sum: []byte{0xbe, 0xef}}}
			}
			m = New(Input{
				Request:          req,
				Fingerprint:      fp.Of(req),
				FingerprintKeyID: "fp-cur",
				FingerprintUnder: fingerprintUnder(req),
				MaskedPAN:        card.Mask(req.GetCard().GetPan()),
				PANHash:          []byte{0xca, 0xfe},
				PANHashKeyID:     "pan-cur",
				OtherPANHashes:   others,
				Attempt:          int32(atoi(t, args["attempt"], 1)),
				RouteRule:        "default",
				CellID:           "cell-a",
				LastResort:       args["last-resort"] == "true",
				Directory:        args["directory"] == "true",
				Call:             args["call"],
				Home:             args["home"] == "true",
			}, testPolicy, testRef, now)
			a = m.Start()
		case "event":
			a = m.Step(parseEvent(t, req, fields[1], args))
		default:
			t.Fatalf("unknown command %q", cmd)
		}
		out.WriteString(formatAction(a) + "\n")
	}
	return out.String()
}

func kv(t *testing.T, fields []string) map[string]string {
	m := map[string]string{}
	for _, f := range fields {
		k, v, ok := strings.Cut(f, "=")
		if ok {
			m[k] = v
		} else {
			m[f] = ""
		}
	}
	return m
}

func atoi(t *testing.T, s string, def int64) int64 {
	if s == "" {
		return def
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		t.Fatalf("bad number %q", s)
	}
	return n
}

func applyRequest(t *testing.T, r *cellpayv1.SubmitTransactionRequest, args map[string]string) {
	for k, v := range args {
		switch k {
		case "id":
			r.TransactionId = v
		case "type":
			r.PaymentType = cellpayv1.PaymentType(cellpayv1.PaymentType_value[v])
			if r.PaymentType == cellpayv1.PaymentType_BANK_TRANSFER {
				r.Card = nil
			}
		case "amount":
			r.Amount.MinorUnits = atoi(t, v, 0)
		case "currency":
			r.Amount.Currency = v
		case "mcc":
			r.Merchant.Mcc = v
		case "partner":
			r.PartnerId = v
		case "pan":
			r.Card.Pan = v
		default:
			t.Fatalf("unknown request field %q", k)
		}
	}
}

// parseEvent builds the event name with args; req is the transcript's
// request, whose key an existing record has unless partner= says otherwise.
func parseEvent(t *testing.T, req *cellpayv1.SubmitTransactionRequest, name string, args map[string]string) Event {
	switch name {
	case "inserted":
		return Inserted{}
	case "existing":
		other := testRequest()
		if args["payload"] == "other" {
			other.Amount.MinorUnits++
		}
		partner := req.GetPartnerId()
		if p, ok := args["partner"]; ok {
			partner = p
		}
		keyID, f := storedFingerprint(t, args, other)
		r := &Record{
			PartnerID: partner, TransactionID: req.GetTransactionId(), Fingerprint: f, FingerprintKeyID: keyID, State: State(args["state"]),
			AuthCode: args["auth"], CellID: "cell-a", Attempt: 1,
		}
		if keyID == RecoveredKeyID {
			// What the issuer's record held of the payload.
			r.PaymentType, r.Amount, r.Currency = other.GetPaymentType(), other.GetAmount().GetMinorUnits(), other.GetAmount().GetCurrency()
			if r.State == StateDeclined {
				r.Amount, r.Currency = 0, ""
			}
		}
		return Existing{Record: r, Active: args["active"] == "true"}
	case "claimed", "held":
		// The entry of this transcript's request (as it is now), unless
		// payload=other.
		other := proto.CloneOf(req)
		if args["payload"] == "other" {
			other.Amount.MinorUnits++
		}
		keyID, f := storedFingerprint(t, args, other)
		e := Entry{Owner: args["owner"], Call: args["call"], Attempt: int32(atoi(t, args["attempt"], 1)),
			Fingerprint: f, FingerprintKeyID: keyID, State: EntryState(args["state"]), Revision: uint64(atoi(t, args["rev"], 1)),
			Pinned: args["pinned"] == "true", Released: args["released"] == "true"}
		if e.State == EntryFinal {
			e.Answer = &cellpayv1.Transaction{TransactionId: req.GetTransactionId(), Status: cellpayv1.TransactionStatus_APPROVED,
				AuthCode: args["auth"], CellId: e.Owner}
		}
		if name == "held" {
			return Held{Entry: e}
		}
		return Claimed{Entry: e, Active: args["active"] == "true"}
	case "claim-failed":
		return ClaimFailed{Err: errors.New("nats: timeout"), Outage: args["outage"] == "true"}
	case "velocity":
		return Velocity{Count: atoi(t, args["count"], 0), Amount: atoi(t, args["amount"], 0)}
	case "persisted":
		return Persisted{}
	case "pnr-confirmed":
		return PNRConfirmed{}
	case "pnr-refused":
		return PNRRefused{Err: errors.New("stream cancelled")}
	case "issuer":
		if args["approved"] == "true" {
			return IssuerAnswered{Approved: true, AuthCode: args["code"]}
		}
		return IssuerAnswered{DeclineReason: args["reason"]}
	case "issuer-unknown":
		return IssuerUnknown{Err: errors.New("deadline exceeded")}
	case "store-failed-in-progress":
		return StoreFailed{Err: fmt.Errorf("wait: %w", ErrInProgress)}
	case "store-failed":
		return StoreFailed{Err: errors.New("connection refused")}
	}
	t.Fatalf("unknown event %q", name)
	return nil
}

func formatRecord(r *Record) string {
	s := fmt.Sprintf("id=%s state=%s", r.TransactionID, r.State)
	if r.DeclineReason != "" {
		s += " reason=" + r.DeclineReason
	}
	if r.AuthCode != "" {
		s += " auth=" + r.AuthCode
	}
	if r.SettlementCurrency != "" {
		s += fmt.Sprintf(" settlement=%d%s", r.SettlementAmount, r.SettlementCurrency)
	}
	if r.MaskedPAN != "" {
		s += " pan=" + r.MaskedPAN
	}
	s += fmt.Sprintf(" attempt=%d", r.Attempt)
	if r.Unfiled {
		s += " unfiled"
	}
	return s
}

func formatKey(k idempotency.Key) string {
	return "partner=" + k.PartnerID + " id=" + k.TransactionID
}

func formatAction(a Action) string {
	switch a := a.(type) {
	case Claim:
		e := a.Entry
		s := fmt.Sprintf("Claim %s owner=%s call=%s attempt=%d state=%s", formatKey(a.Key), e.Owner, e.Call, e.Attempt, e.State)
		if e.Pinned {
			s += " pinned"
		}
		if a.Revision != 0 {
			s += fmt.Sprintf(" at-rev=%d", a.Revision)
		}
		return s
	case ReplyEntry:
		return fmt.Sprintf("ReplyEntry owner=%s status=%s auth=%s", a.Entry.Owner, a.Entry.Answer.GetStatus(), a.Entry.Answer.GetAuthCode())
	case Insert:
		return "Insert " + formatRecord(a.Record)
	case Reclaim:
		return "Reclaim " + formatRecord(a.Record)
	case Wait:
		return "Wait " + formatKey(a.Key)
	case CheckVelocity:
		s := fmt.Sprintf("CheckVelocity since=%s exclude=%s", a.Since.Format(time.RFC3339Nano), a.Exclude)
		if len(a.PANHashes) > 1 {
			ids := make([]string, len(a.PANHashes))
			for i, h := range a.PANHashes {
				ids[i] = h.KeyID
			}
			s += " keys=" + strings.Join(ids, ",")
		}
		return s
	case Persist:
		if a.OrFrom != "" {
			return fmt.Sprintf("Persist from=%s or=%s own-row %s", a.From, a.OrFrom, formatRecord(a.Record))
		}
		if a.Decided {
			return fmt.Sprintf("Persist from=%s decided %s", a.From, formatRecord(a.Record))
		}
		return fmt.Sprintf("Persist from=%s %s", a.From, formatRecord(a.Record))
	case EmitPNR:
		return "EmitPNR " + formatKey(a.Key)
	case Authorize:
		return "Authorize " + formatRecord(a.Record)
	case Reply:
		return fmt.Sprintf("Reply status=%s %s", a.Record.State.Status(), formatRecord(a.Record))
	case Reject:
		return "Reject " + a.Err.Error()
	case Reroute:
		if a.Owner != "" {
			return "Reroute " + a.Reason + " (to its owner " + a.Owner + ")"
		}
		return "Reroute " + a.Reason
	}
	return fmt.Sprintf("unknown action %T", a)
}

// TestNeverAuthorizeBeforePNR drives the machine with every event at every
// step and checks the rules it exists for: Authorize only ever follows a
// durable sending state (Persist answered by Persisted) and an EmitPNR the
// GTR confirmed; once confirmed, the attempt is never re-routable.
func TestNeverAuthorizeBeforePNR(t *testing.T) {
	events := []Event{
		Inserted{}, Velocity{}, Velocity{Count: 100}, Persisted{}, PNRConfirmed{}, PNRRefused{Err: errors.New("x")},
		IssuerAnswered{Approved: true, AuthCode: "X"}, IssuerUnknown{Err: errors.New("x")},
		StoreFailed{Err: errors.New("x")}, Existing{Record: &Record{PartnerID: "p-001", TransactionID: "t-1", State: StateReceived}},
	}
	var walk func(path []Event, depth int)
	walk = func(path []Event, depth int) {
		req := testRequest()
		m := New(Input{Request: req, Fingerprint: fp.Of(req), PANHash: []byte{1}, CellID: "c"}, testPolicy, testRef, time.Now)
		a := m.Start()
		sendingDurable, confirmed := false, false
		for _, ev := range path {
			if Done(a) {
				return
			}
			if p, ok := a.(Persist); ok && p.Record.State == StateSending {
				_, sendingDurable = ev.(Persisted)
			}
			if _, ok := a.(EmitPNR); ok {
				if !sendingDurable {
					t.Fatalf("EmitPNR before the sending state was durable, path %T", path)
				}
				_, confirmed = ev.(PNRConfirmed)
			}
			a = m.Step(ev)
			if _, ok := a.(Authorize); ok && !confirmed {
				t.Fatalf("Authorize without a confirmed PNR, path %T", path)
			}
			if _, ok := a.(Reroute); ok && confirmed {
				t.Fatalf("Reroute after the point of no return, path %T", path)
			}
		}
		if depth == 0 || Done(a) {
			return
		}
		for _, ev := range events {
			walk(append(append([]Event(nil), path...), ev), depth-1)
		}
	}
	walk(nil, 7)
}
