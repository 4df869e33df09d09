package checker

import (
	"encoding/json"
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc/codes"

	"github.com/cellpay/cellpay/internal/dev/issuersim"
	"github.com/cellpay/cellpay/internal/dev/pgtest"
	"github.com/cellpay/cellpay/pkg/api/cellpayv1"
	"github.com/cellpay/cellpay/pkg/idempotency"
	"github.com/cellpay/cellpay/pkg/issuerproto"
)

const (
	approved = cellpayv1.TransactionStatus_APPROVED
	declined = cellpayv1.TransactionStatus_DECLINED
	pending  = cellpayv1.TransactionStatus_PENDING
	failed   = cellpayv1.TransactionStatus_FAILED
)

// ok is a non-error answer for the transaction id, as key takes it.
func ok(id string, st cellpayv1.TransactionStatus, auth, reason string) Answer {
	k := key(id)
	return Answer{PartnerID: k.PartnerID, ID: k.TransactionID, Status: st, AuthCode: auth, DeclineReason: reason}
}

func errAnswer(id string, c codes.Code) Answer {
	k := key(id)
	return Answer{PartnerID: k.PartnerID, ID: k.TransactionID, Code: c}
}

// ac is the issuer's auth code for the transaction id, as key takes it.
func ac(id string) string {
	k := key(id)
	return issuersim.AuthCode(k.PartnerID, k.TransactionID)
}

// TestCheck seeds one run per scenario and checks the report's counts and
// that each problem names the seeded ID.
func TestCheck(t *testing.T) {
	tests := []struct {
		name    string
		setup   setup
		answers []Answer
		want    Report // counts only; Answers, Errors, Examples and issuer totals are not compared
		// wantExamples maps a problem to the transactions (as key takes
		// them) it must name; with wantOnly, the only ones.
		wantExamples map[string][]string
		wantOnly     bool
		wantOK       bool
	}{
		{
			name: "clean",
			setup: setup{
				rows: []row{
					{cell: "cell-a", id: "c-approved", state: "approved", auth: ac("c-approved")},
					// Re-routed before its PNR: cell-a gave it up, cell-b decided.
					{cell: "cell-a", id: "c-declined", state: "abandoned", attempt: 1},
					{cell: "cell-b", id: "c-declined", state: "declined", reason: "do_not_honor", attempt: 2},
					{cell: "cell-a", id: "c-pending", state: "approved", auth: ac("c-pending")},
					// Failed before its PNR in one cell, stranded in another.
					{cell: "cell-a", id: "c-fx", state: "failed", reason: "no_fx_rate"},
					{cell: "cell-b", id: "c-fx", state: "received", attempt: 2},
					// The partner gave up but the transaction completed.
					{cell: "cell-b", id: "c-late", state: "approved", auth: ac("c-late")},
				},
				authorize: []*issuerproto.AuthorizeRequest{
					auth("c-approved", issuersim.CardApproved),
					auth("c-declined", issuersim.CardDoNotHonor),
					auth("c-pending", issuersim.CardApproved),
					auth("c-late", issuersim.CardApproved),
				},
			},
			answers: []Answer{
				ok("c-approved", approved, ac("c-approved"), ""),
				ok("c-approved", approved, ac("c-approved"), ""), // a replay
				ok("c-declined", declined, "", "do_not_honor"),
				ok("c-pending", pending, "", ""),
				ok("c-fx", failed, "", "no_fx_rate"),
				errAnswer("c-late", codes.DeadlineExceeded),
				errAnswer("c-unavailable", codes.Unavailable),
				errAnswer("c-conflict", codes.AlreadyExists),
			},
			want:   Report{Attempted: 7, Approved: 3, Declined: 1, Failed: 1, PendingResolved: 1, NotStarted: 2},
			wantOK: true,
		},
		{
			name: "duplicate issuer effect",
			setup: setup{
				rows:        []row{{cell: "cell-a", id: "d-1", state: "approved", auth: ac("d-1")}, {cell: "cell-a", id: "d-2", state: "approved", auth: ac("d-2")}},
				authorize:   []*issuerproto.AuthorizeRequest{auth("d-1", issuersim.CardApproved), auth("d-2", issuersim.CardApproved)},
				extraEffect: []string{"d-2"},
			},
			answers:      []Answer{ok("d-1", approved, ac("d-1"), ""), ok("d-2", approved, ac("d-2"), "")},
			want:         Report{Attempted: 2, Approved: 2, DuplicatedEffects: 1},
			wantExamples: map[string][]string{ProblemDuplicatedEffects: {"d-2"}},
		},
		{
			name: "two cells past the PNR",
			setup: setup{
				rows: []row{
					{cell: "cell-a", id: "r-1", state: "approved", auth: ac("r-1"), attempt: 1},
					{cell: "cell-b", id: "r-1", state: "approved", auth: ac("r-1"), attempt: 2},
					{cell: "cell-a", id: "r-2", state: "sending", attempt: 1},
					{cell: "cell-b", id: "r-2", state: "declined", reason: "do_not_honor", attempt: 2},
					{cell: "cell-a", id: "r-ok", state: "abandoned", attempt: 1},
					{cell: "cell-b", id: "r-ok", state: "approved", auth: ac("r-ok"), attempt: 2},
				},
				authorize: []*issuerproto.AuthorizeRequest{
					auth("r-1", issuersim.CardApproved), auth("r-2", issuersim.CardDoNotHonor), auth("r-ok", issuersim.CardApproved),
				},
			},
			answers: []Answer{
				ok("r-1", approved, ac("r-1"), ""),
				ok("r-2", declined, "", "do_not_honor"),
				ok("r-ok", approved, ac("r-ok"), ""),
			},
			want:         Report{Attempted: 3, Approved: 2, Declined: 1, ReroutesAfterPNR: 2},
			wantExamples: map[string][]string{ProblemReroutesAfterPNR: {"r-1", "r-2"}},
		},
		{
			name: "lost",
			setup: setup{
				// l-answered: approved to the partner, no record anywhere.
				// l-effect: the partner got an error, the issuer applied it,
				// no record. l-pending: same, but a cell still says sending.
				rows: []row{{cell: "cell-b", id: "l-pending", state: "sending"}},
				authorize: []*issuerproto.AuthorizeRequest{
					auth("l-answered", issuersim.CardApproved),
					auth("l-effect", issuersim.CardApproved),
					auth("l-pending", issuersim.CardApproved),
				},
			},
			answers: []Answer{
				ok("l-answered", approved, ac("l-answered"), ""),
				errAnswer("l-effect", codes.DeadlineExceeded),
				errAnswer("l-pending", codes.Unavailable),
				ok("l-nothing", pending, "", ""), // never reached the issuer either
			},
			want: Report{Attempted: 4, Pending: 1, Lost: 4, EffectsWithoutRecord: 2},
			wantExamples: map[string][]string{
				ProblemLost:                 {"l-answered", "l-effect", "l-pending", "l-nothing"},
				ProblemEffectsWithoutRecord: {"l-effect", "l-pending"},
			},
		},
		{
			name: "differing answers",
			setup: setup{
				rows: []row{
					{cell: "cell-a", id: "x-status", state: "declined", reason: "do_not_honor"},
					{cell: "cell-a", id: "x-auth", state: "approved", auth: ac("x-auth")},
					{cell: "cell-a", id: "x-final-pending", state: "sending"},
					{cell: "cell-a", id: "x-replay", state: "approved", auth: ac("x-replay")},
				},
				authorize: []*issuerproto.AuthorizeRequest{
					auth("x-status", issuersim.CardDoNotHonor), auth("x-auth", issuersim.CardApproved),
					auth("x-replay", issuersim.CardApproved),
				},
			},
			answers: []Answer{
				ok("x-status", approved, "ABC123", ""),
				ok("x-auth", approved, "WRONG1", ""),
				ok("x-final-pending", approved, "ZZZ999", ""),
				ok("x-replay", approved, ac("x-replay"), ""),
				ok("x-replay", declined, "", "do_not_honor"),
			},
			want: Report{Attempted: 4, Approved: 2, Declined: 1, Pending: 1, DifferingAnswers: 4},
			wantExamples: map[string][]string{
				ProblemDifferingAnswers: {"x-status", "x-auth", "x-final-pending", "x-replay"},
			},
		},
		{
			// Transaction IDs are a namespace per partner: one ID, three
			// partners, three transactions in two cells, each with its own
			// effect and answer. Nothing here is a duplicate, a re-route or
			// a differing answer.
			name: "one ID, three partners",
			setup: setup{
				rows: []row{
					{cell: "cell-a", partner: "p-1", id: "s-1", state: "approved", auth: ac("p-1/s-1")},
					{cell: "cell-b", partner: "p-2", id: "s-1", state: "approved", auth: ac("p-2/s-1")},
					{cell: "cell-a", partner: "p-3", id: "s-1", state: "declined", reason: "do_not_honor"},
				},
				authorize: []*issuerproto.AuthorizeRequest{
					auth("p-1/s-1", issuersim.CardApproved), auth("p-2/s-1", issuersim.CardApproved),
					auth("p-3/s-1", issuersim.CardDoNotHonor),
				},
			},
			answers: []Answer{
				ok("p-1/s-1", approved, ac("p-1/s-1"), ""),
				ok("p-2/s-1", approved, ac("p-2/s-1"), ""),
				ok("p-2/s-1", approved, ac("p-2/s-1"), ""), // a replay
				ok("p-3/s-1", declined, "", "do_not_honor"),
			},
			want:   Report{Attempted: 3, Approved: 2, Declined: 1},
			wantOK: true,
		},
		{
			// Problems are per partner too: p-2's transaction is lost, its
			// issuer effect duplicated and its answer differs, while p-1's
			// with the same ID is clean and named in no example.
			name: "one partner's problems are its own",
			setup: setup{
				rows: []row{
					{cell: "cell-a", partner: "p-1", id: "s-2", state: "approved", auth: ac("p-1/s-2")},
					{cell: "cell-a", partner: "p-1", id: "s-3", state: "approved", auth: ac("p-1/s-3")},
					{cell: "cell-b", partner: "p-2", id: "s-3", state: "declined", reason: "do_not_honor"},
				},
				authorize: []*issuerproto.AuthorizeRequest{
					auth("p-1/s-2", issuersim.CardApproved), auth("p-2/s-2", issuersim.CardApproved),
					auth("p-1/s-3", issuersim.CardApproved), auth("p-2/s-3", issuersim.CardDoNotHonor),
				},
				extraEffect: []string{"p-2/s-3"},
			},
			answers: []Answer{
				ok("p-1/s-2", approved, ac("p-1/s-2"), ""),
				ok("p-2/s-2", approved, ac("p-2/s-2"), ""),
				ok("p-1/s-3", approved, ac("p-1/s-3"), ""),
				ok("p-2/s-3", approved, ac("p-2/s-3"), ""),
			},
			want: Report{Attempted: 4, Approved: 2, Declined: 1, Lost: 1, DuplicatedEffects: 1, DifferingAnswers: 1},
			wantExamples: map[string][]string{
				ProblemLost:              {"p-2/s-2"},
				ProblemDuplicatedEffects: {"p-2/s-3"},
				ProblemDifferingAnswers:  {"p-2/s-3"},
			},
			wantOnly: true,
		},
		{
			name: "unverified",
			setup: setup{
				rows:      []row{{cell: "cell-a", id: "u-1", state: "approved", auth: ac("u-1")}},
				authorize: []*issuerproto.AuthorizeRequest{auth("u-1", issuersim.CardApproved)},
				broken:    []string{"u-1"},
			},
			answers:      []Answer{ok("u-1", approved, ac("u-1"), "")},
			want:         Report{Attempted: 1, Unverified: 1},
			wantExamples: map[string][]string{ProblemUnverified: {"u-1"}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := testCtx(t)
			e := newEnv(ctx, t, tt.setup)
			got, err := Check(ctx, e.cfg, tt.answers)
			if err != nil {
				t.Fatalf("Check: %v", err)
			}
			counts := got
			counts.Answers, counts.Errors, counts.Examples = 0, nil, nil
			counts.IssuerEffects, counts.IssuerRequests = 0, 0
			if !reflect.DeepEqual(counts, tt.want) {
				t.Errorf("counts:\n got %+v\nwant %+v\nreport:\n%v", counts, tt.want, got)
			}
			if got.OK() != tt.wantOK {
				t.Errorf("OK() = %v, want %v\n%v", got.OK(), tt.wantOK, got)
			}
			for problem, ids := range tt.wantExamples {
				var named []string
				for _, ex := range got.Examples[problem] {
					named = append(named, idempotency.Key{PartnerID: ex.PartnerID, TransactionID: ex.ID}.String())
				}
				for _, id := range ids {
					if !slices.Contains(named, key(id).String()) {
						t.Errorf("examples of %s = %v, want %s among them", problem, named, key(id))
					}
				}
				if tt.wantOnly && len(named) != len(ids) {
					t.Errorf("examples of %s = %v, want only %v", problem, named, ids)
				}
			}
			if got.Answers != len(tt.answers) {
				t.Errorf("Answers = %d, want %d", got.Answers, len(tt.answers))
			}
			// The report survives JSON and says what it found.
			b, err := json.Marshal(got)
			if err != nil {
				t.Fatal(err)
			}
			var back Report
			if err := json.Unmarshal(b, &back); err != nil || back.Lost != got.Lost || back.Approved != got.Approved {
				t.Errorf("JSON round trip: %v, %+v", err, back)
			}
			wantResult := "RESULT: OK"
			if !tt.wantOK {
				wantResult = "RESULT: INVARIANTS BROKEN"
			}
			if s := got.String(); !strings.Contains(s, wantResult) {
				t.Errorf("String() lacks %q:\n%s", wantResult, s)
			}
		})
	}
}

func TestCheckCleanTotals(t *testing.T) {
	// Registered first, so it runs after the servers and databases are gone.
	t.Cleanup(func() { goleak.VerifyNone(t, pgtest.IgnoreGoroutines()) })
	ctx := testCtx(t)
	e := newEnv(ctx, t, setup{
		rows:      []row{{cell: "cell-a", id: "t-1", state: "approved", auth: ac("t-1")}},
		authorize: []*issuerproto.AuthorizeRequest{auth("t-1", issuersim.CardApproved), auth("t-1", issuersim.CardApproved)},
	})
	got, err := Check(ctx, e.cfg, []Answer{ok("t-1", approved, ac("t-1"), ""), errAnswer("t-2", codes.InvalidArgument)})
	if err != nil {
		t.Fatal(err)
	}
	if got.IssuerEffects != 1 || got.IssuerRequests != 2 || got.Errors["INVALID_ARGUMENT"] != 1 || !got.OK() {
		t.Errorf("got %+v", got)
	}
}

func TestCheckExamplesCapped(t *testing.T) {
	ctx := testCtx(t)
	e := newEnv(ctx, t, setup{})
	var answers []Answer
	for _, id := range []string{"a", "b", "c", "d", "e"} {
		answers = append(answers, ok(id, approved, "X", ""))
	}
	e.cfg.Examples = 2
	got, err := Check(ctx, e.cfg, answers)
	if err != nil {
		t.Fatal(err)
	}
	if got.Lost != 5 || len(got.Examples[ProblemLost]) != 2 {
		t.Errorf("lost %d with %d examples, want 5 with 2", got.Lost, len(got.Examples[ProblemLost]))
	}
}

func TestCheckErrors(t *testing.T) {
	ctx := testCtx(t)
	t.Run("invalid config", func(t *testing.T) {
		_, err := Check(ctx, Config{}, nil)
		if !errors.Is(err, ErrInvalidConfig) {
			t.Fatalf("got %v, want ErrInvalidConfig", err)
		}
		for _, want := range []string{"GTRAddr", "IssuerAddr", "cell"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("%v does not name %s", err, want)
			}
		}
	})
	t.Run("unreachable database", func(t *testing.T) {
		e := newEnv(ctx, t, setup{})
		e.cfg.Cells = append(e.cfg.Cells, Cell{ID: "cell-c", DatabaseURL: "postgres://nobody@127.0.0.1:1/none?connect_timeout=2"})
		_, err := Check(ctx, e.cfg, []Answer{ok("a", approved, "X", "")})
		if err == nil || !strings.Contains(err.Error(), "cell-c") {
			t.Fatalf("got %v, want an error naming cell-c", err)
		}
	})
}

func TestWaitResolved(t *testing.T) {
	ctx := testCtx(t)
	e := newEnv(ctx, t, setup{rows: []row{
		{cell: "cell-a", id: "w-1", state: "sending"},
		{cell: "cell-a", id: "w-2", state: "approved", auth: "X"},
	}})
	// p-2's w-2 is another transaction than p-1's, and still PENDING.
	e.payments.set(&cellpayv1.Transaction{PartnerId: "p-2", TransactionId: "w-2", Status: pending, CellId: "cell-b"})
	ids := []idempotency.Key{key("w-1"), key("w-2"), key("w-missing")}

	_, err := WaitResolved(ctx, e.cfg, ids, 100*time.Millisecond)
	if !errors.Is(err, ErrNotResolved) || !strings.Contains(err.Error(), "p-1/w-1") || strings.Contains(err.Error(), "w-2") {
		t.Fatalf("got %v, want ErrNotResolved naming p-1/w-1 alone", err)
	}
	if _, err := WaitResolved(ctx, e.cfg, []idempotency.Key{key("p-2/w-2")}, 100*time.Millisecond); !errors.Is(err, ErrNotResolved) {
		t.Fatalf("p-2's w-2: %v, want ErrNotResolved", err)
	}

	const after = 300 * time.Millisecond
	timer := time.AfterFunc(after, func() {
		e.payments.set(&cellpayv1.Transaction{PartnerId: testPartner, TransactionId: "w-1", Status: approved, CellId: "cell-a"})
	})
	defer timer.Stop()
	took, err := WaitResolved(ctx, e.cfg, ids, 10*time.Second)
	if err != nil {
		t.Fatalf("WaitResolved: %v", err)
	}
	if took < after-50*time.Millisecond || took > 5*time.Second {
		t.Errorf("took %v, want about %v", took, after)
	}
}
