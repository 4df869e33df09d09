package reconcile

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/cellpay/cellpay/internal/dev/issuersim"
	"github.com/cellpay/cellpay/internal/pnr/cellside"
	"github.com/cellpay/cellpay/pkg/api/cellpayv1"
	"github.com/cellpay/cellpay/pkg/idempotency"
	"github.com/cellpay/cellpay/pkg/issuerproto"
)

// memStore is an in-memory Store for the reconciler's pure logic.
type memStore struct {
	mu   sync.Mutex
	recs map[idempotency.Key]*cellside.Record
}

func (m *memStore) Unresolved(_ context.Context, before time.Time, limit int) ([]*cellside.Record, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []*cellside.Record
	for _, r := range m.recs {
		if (r.State == cellside.StateSending || r.State == cellside.StateDeciding) && r.UpdatedAt.Before(before) && len(out) < limit {
			c := *r
			out = append(out, &c)
		}
	}
	return out, nil
}

func (m *memStore) Persist(_ context.Context, r *cellside.Record, from cellside.State) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.recs[r.Key()].State != from {
		return errors.New("state changed")
	}
	c := *r
	m.recs[r.Key()] = &c
	return nil
}

func (m *memStore) Unfiled(_ context.Context, limit int) ([]*cellside.Record, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []*cellside.Record
	for _, r := range m.recs {
		if r.Unfiled && r.State.Terminal() && len(out) < limit {
			c := *r
			out = append(out, &c)
		}
	}
	return out, nil
}

func (m *memStore) MarkFiled(_ context.Context, k idempotency.Key) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if r := m.recs[k]; r != nil {
		r.Unfiled = false
	}
	return nil
}

// fakeIssuer answers inquiries by (partner, transaction ID), as the issuer
// keys them, and closes a transaction without an answer when an inquiry
// asks it to (unless ignoresClose: an issuer that does not know close).
type fakeIssuer struct {
	answers      map[idempotency.Key]*issuerproto.AuthorizeResponse
	closed       map[idempotency.Key]bool
	ignoresClose bool
	down         bool
	inquired     []idempotency.Key
	closing      []idempotency.Key // the inquiries made with close
}

func (f *fakeIssuer) Inquire(_ context.Context, in *issuerproto.InquireRequest, _ ...grpc.CallOption) (*issuerproto.AuthorizeResponse, error) {
	k := idempotency.Key{PartnerID: in.GetPartnerId(), TransactionID: in.GetTransactionId()}
	f.inquired = append(f.inquired, k)
	if in.GetClose() {
		f.closing = append(f.closing, k)
	}
	if f.down {
		return nil, status.Error(codes.Unavailable, "down")
	}
	if a, ok := f.answers[k]; ok {
		return a, nil
	}
	if in.GetClose() && !f.ignoresClose {
		if f.closed == nil {
			f.closed = map[idempotency.Key]bool{}
		}
		f.closed[k] = true
	}
	if f.closed[k] {
		return &issuerproto.AuthorizeResponse{PartnerId: k.PartnerID, TransactionId: k.TransactionID, Closed: true}, nil
	}
	return nil, status.Error(codes.NotFound, "never seen")
}

// key is transaction id of partner p-001, the partner of most records here.
func key(id string) idempotency.Key { return idempotency.Key{PartnerID: "p-001", TransactionID: id} }

func TestResolves(t *testing.T) {
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	rec := func(k idempotency.Key, state cellside.State, age time.Duration) *cellside.Record {
		return &cellside.Record{PartnerID: k.PartnerID, TransactionID: k.TransactionID, State: state, UpdatedAt: now.Add(-age)}
	}
	// "shared" is one transaction ID of two partners: two transactions,
	// each resolved by its own partner's inquiry.
	sharedB := idempotency.Key{PartnerID: "p-002", TransactionID: "shared"}
	recs := map[idempotency.Key]*cellside.Record{}
	for k, r := range map[idempotency.Key]struct {
		state cellside.State
		age   time.Duration
	}{
		key("approved"):  {cellside.StateSending, 5 * time.Second},
		key("declined"):  {cellside.StateSending, 5 * time.Second},
		key("lost-new"):  {cellside.StateSending, 5 * time.Second},
		key("lost-old"):  {cellside.StateSending, time.Minute},
		key("too-young"): {cellside.StateSending, 100 * time.Millisecond},
		key("busy"):      {cellside.StateSending, 5 * time.Second},
		key("final"):     {cellside.StateApproved, time.Minute},
		key("received"):  {cellside.StateReceived, time.Minute},
		key("shared"):    {cellside.StateSending, 5 * time.Second},
		sharedB:          {cellside.StateSending, 5 * time.Second},
		key("closed"):    {cellside.StateSending, 5 * time.Second}, // closed by another's inquiry
	} {
		recs[k] = rec(k, r.state, r.age)
	}
	st := &memStore{recs: recs}
	iss := &fakeIssuer{answers: map[idempotency.Key]*issuerproto.AuthorizeResponse{
		key("approved"): {Approved: true, AuthCode: "A1"},
		key("declined"): {DeclineReason: "do_not_honor"},
		key("busy"):     {Approved: true, AuthCode: "B1"},
		key("shared"):   {Approved: true, AuthCode: "S1"},
		sharedB:         {DeclineReason: "stolen_card"},
	}, closed: map[idempotency.Key]bool{key("closed"): true}}
	r, err := New(Config{Store: st, Issuer: iss, Now: func() time.Time { return now },
		Busy: func(k idempotency.Key) bool { return k == key("busy") }, Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	n, err := r.Once(context.Background())
	if err != nil || n != 6 {
		t.Fatalf("Once = %d, %v; want 6 resolved", n, err)
	}
	want := map[idempotency.Key]string{
		key("approved"): "approved/A1/", key("declined"): "declined//do_not_honor", key("lost-old"): "failed//issuer_not_reached",
		key("lost-new"): "sending//", key("too-young"): "sending//", key("busy"): "sending//", key("final"): "approved//",
		key("received"): "received//", key("shared"): "approved/S1/", sharedB: "declined//stolen_card",
		key("closed"): "failed//issuer_not_reached",
	}
	for k, w := range want {
		r := st.recs[k]
		if got := string(r.State) + "/" + r.AuthCode + "/" + r.DeclineReason; got != w {
			t.Errorf("%s: %s, want %s", k, got, w)
		}
	}
	for _, k := range iss.inquired {
		if k == key("final") || k == key("received") || k == key("busy") || k == key("too-young") {
			t.Errorf("inquired about %s", k)
		}
	}
	// Only the record past NotFoundAfter is closed; the younger ones are
	// asked without closing, and lost-new is left to land.
	if len(iss.closing) != 1 || iss.closing[0] != key("lost-old") {
		t.Errorf("inquiries with close %v, want lost-old only", iss.closing)
	}
	if iss.closed[key("lost-new")] {
		t.Error("lost-new closed before NotFoundAfter")
	}
	// The issuer down: nothing changes, no error escapes per record.
	st.recs[key("x")] = rec(key("x"), cellside.StateSending, time.Minute)
	iss.down = true
	if n, err := r.Once(context.Background()); err != nil || n != 0 || st.recs[key("x")].State != cellside.StateSending {
		t.Fatalf("issuer down: %d, %v, %s", n, err, st.recs[key("x")].State)
	}
}

// fakeDirectory owns entries by cell: Finalize succeeds for the owner (or
// a missing entry) and fails with errNotOwner for any other cell.
type fakeDirectory struct {
	owners    map[idempotency.Key]string
	final     map[idempotency.Key]*cellpayv1.Transaction // final entries' answers
	down      bool
	refused   map[idempotency.Key]bool // refused alone (its history full)
	finalized []idempotency.Key
}

var errNotOwner = errors.New("not the owner")

func (f *fakeDirectory) Get(_ context.Context, k idempotency.Key) (cellside.Entry, bool, error) {
	if f.down {
		return cellside.Entry{}, false, status.Error(codes.Unavailable, "nats down")
	}
	o, ok := f.owners[k]
	e := cellside.Entry{Owner: o, State: cellside.EntryOwned}
	if a, final := f.final[k]; final {
		e.State, e.Answer = cellside.EntryFinal, a
	}
	return e, ok, nil
}

func (f *fakeDirectory) Finalize(_ context.Context, k idempotency.Key, owner string, _ idempotency.Fingerprint, _ string, _ *cellpayv1.Transaction) error {
	if f.down || f.refused[k] {
		return status.Error(codes.Unavailable, "nats down")
	}
	if o, ok := f.owners[k]; ok && o != owner {
		return errNotOwner
	}
	f.finalized = append(f.finalized, k)
	return nil
}

// TestOutcomeOnlyWhileTheEntryIsOurs: an issuer outcome found for a
// sending record is adopted only after the directory took it for this
// cell. When another cell took the entry over (the record's attempt never
// had Proceed), the effect the issuer reports is that cell's, and the
// record is abandoned, so that only one cell holds the transaction past
// its point of no return. With the directory down, nothing is decided.
func TestOutcomeOnlyWhileTheEntryIsOurs(t *testing.T) {
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	rec := func(id string) *cellside.Record {
		return &cellside.Record{PartnerID: "p-001", TransactionID: id, State: cellside.StateSending, UpdatedAt: now.Add(-time.Minute)}
	}
	st := &memStore{recs: map[idempotency.Key]*cellside.Record{
		key("ours"): rec("ours"), key("taken"): rec("taken"), key("lost-taken"): rec("lost-taken"),
	}}
	iss := &fakeIssuer{answers: map[idempotency.Key]*issuerproto.AuthorizeResponse{
		key("ours"):  {Approved: true, AuthCode: "A1"},
		key("taken"): {Approved: true, AuthCode: "B1"}, // cell-b's effect
	}}
	dir := &fakeDirectory{down: true, owners: map[idempotency.Key]string{key("ours"): "cell-a", key("taken"): "cell-b", key("lost-taken"): "cell-b"}}
	r, err := New(Config{Store: st, Issuer: iss, Directory: dir, CellID: "cell-a", ErrNotOwner: errNotOwner,
		Now: func() time.Time { return now }, Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	if n, _ := r.Once(context.Background()); n != 0 {
		t.Fatalf("directory down: %d resolved, want 0", n)
	}
	for k, rec := range st.recs {
		if rec.State != cellside.StateSending {
			t.Fatalf("directory down: %s became %s", k, rec.State)
		}
	}
	dir.down = false
	if n, err := r.Once(context.Background()); err != nil || n != 3 {
		t.Fatalf("Once = %d, %v; want 3", n, err)
	}
	for k, w := range map[idempotency.Key]string{key("ours"): "approved/A1/", key("taken"): "abandoned//", key("lost-taken"): "abandoned//"} {
		r := st.recs[k]
		if got := string(r.State) + "/" + r.AuthCode + "/" + r.DeclineReason; got != w {
			t.Errorf("%s: %s, want %s", k, got, w)
		}
	}
	if len(dir.finalized) != 1 || dir.finalized[0] != key("ours") {
		t.Fatalf("finalized %v, want ours only", dir.finalized)
	}
	// Only the owner closes an ID: cell-b may be sending the ones it took.
	for _, k := range iss.closing {
		if k != key("ours") {
			t.Fatalf("closed %s, an entry cell-b holds", k)
		}
	}
}

// TestFileAfterOutage: final records decided without a directory entry
// get one once the directory is back, and their mark is cleared; one the
// directory holds for another cell is a conflict, its record unchanged;
// a PENDING one waits for its outcome; with the directory down nothing is
// cleared.
func TestFileAfterOutage(t *testing.T) {
	now := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	rec := func(id string, s cellside.State) *cellside.Record {
		return &cellside.Record{PartnerID: "p-001", TransactionID: id, State: s, AuthCode: "A1", UpdatedAt: now, Unfiled: true}
	}
	st := &memStore{recs: map[idempotency.Key]*cellside.Record{
		key("home"): rec("home", cellside.StateApproved), key("both"): rec("both", cellside.StateApproved),
		key("pending"): rec("pending", cellside.StateSending), key("filed"): rec("filed", cellside.StateDeclined),
	}}
	st.recs[key("filed")].Unfiled = false
	dir := &fakeDirectory{down: true, owners: map[idempotency.Key]string{key("both"): "cell-b"}}
	var results []string
	r, err := New(Config{Store: st, Issuer: &fakeIssuer{}, Directory: dir, CellID: "cell-a", ErrNotOwner: errNotOwner,
		OnFiled: func(r string) { results = append(results, r) }, Now: func() time.Time { return now }, Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	if n, c, err := r.File(context.Background()); err == nil || n+c != 0 || !st.recs[key("home")].Unfiled || !st.recs[key("both")].Unfiled {
		t.Fatalf("directory down: File = %d, %d, %v; marks %v %v", n, c, err, st.recs[key("home")].Unfiled, st.recs[key("both")].Unfiled)
	}
	dir.down = false
	if n, c, err := r.File(context.Background()); err != nil || n != 1 || c != 1 {
		t.Fatalf("File = %d filed, %d conflicts, %v; want 1, 1", n, c, err)
	}
	if len(dir.finalized) != 1 || dir.finalized[0] != key("home") {
		t.Fatalf("finalized %v, want home only", dir.finalized)
	}
	for id, want := range map[string]bool{"home": false, "both": false, "pending": true, "filed": false} {
		if got := st.recs[key(id)].Unfiled; got != want {
			t.Errorf("%s: unfiled %v, want %v", id, got, want)
		}
	}
	if st.recs[key("both")].State != cellside.StateApproved {
		t.Errorf("conflict changed the record: %s", st.recs[key("both")].State)
	}
	if len(results) != 2 {
		t.Errorf("counted %v, want a filed and a conflict", results)
	}
	if n, c, err := r.File(context.Background()); err != nil || n+c != 0 {
		t.Fatalf("second File = %d, %d, %v; want nothing left", n, c, err)
	}
	// One record the directory refuses blocks no other.
	st.recs[key("stuck")], st.recs[key("next")] = rec("stuck", cellside.StateApproved), rec("next", cellside.StateApproved)
	st.recs[key("stuck")].UpdatedAt = now.Add(-time.Hour)
	dir.refused = map[idempotency.Key]bool{key("stuck"): true}
	if n, c, err := r.File(context.Background()); err == nil || n != 1 || c != 0 || st.recs[key("next")].Unfiled || !st.recs[key("stuck")].Unfiled {
		t.Fatalf("with one refused: File = %d, %d, %v; next unfiled %v, stuck unfiled %v", n, c, err, st.recs[key("next")].Unfiled, st.recs[key("stuck")].Unfiled)
	}
}

// TestFailedOnlyWhenClosed: past NotFoundAfter, FAILED issuer_not_reached
// is recorded only on the issuer's word that it closed the transaction. An
// issuer that answers the inquiry with close NOT_FOUND (one that does not
// know close) closed nothing, so a late send could still be applied: the
// record stays sending, round after round.
func TestFailedOnlyWhenClosed(t *testing.T) {
	now := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	st := &memStore{recs: map[idempotency.Key]*cellside.Record{
		key("lost"): {PartnerID: "p-001", TransactionID: "lost", State: cellside.StateSending, UpdatedAt: now.Add(-time.Minute)},
	}}
	iss := &fakeIssuer{ignoresClose: true}
	r, err := New(Config{Store: st, Issuer: iss, Now: func() time.Time { return now }, Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if n, err := r.Once(context.Background()); err != nil || n != 0 {
			t.Fatalf("Once = %d, %v; want 0 resolved", n, err)
		}
		if got := st.recs[key("lost")].State; got != cellside.StateSending {
			t.Fatalf("lost: %s, want sending", got)
		}
	}
	if len(iss.closing) != 2 {
		t.Fatalf("inquiries with close %v, want one a round", iss.closing)
	}
	iss.ignoresClose = false
	if n, err := r.Once(context.Background()); err != nil || n != 1 || st.recs[key("lost")].State != cellside.StateFailed {
		t.Fatalf("once the issuer closes: Once = %d, %v, %s; want failed", n, err, st.recs[key("lost")].State)
	}
}

// simIssuer is the issuer simulator in process, as the reconciler's Issuer.
type simIssuer struct{ *issuersim.Server }

func (s simIssuer) Inquire(ctx context.Context, in *issuerproto.InquireRequest, _ ...grpc.CallOption) (*issuerproto.AuthorizeResponse, error) {
	return s.Server.Inquire(ctx, in)
}

// TestLateAuthorizeRefused, against the issuer simulator: the send of a
// record past NotFoundAfter arrives after the reconciler recorded it
// FAILED issuer_not_reached (gRPC deadlines are relative: it waited in a
// stalled connection's buffer), and is refused, with no effect, so the
// FAILED stays true. A younger record's inquiry closes nothing: its slow
// send lands and is recorded as the issuer decided it.
func TestLateAuthorizeRefused(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	now := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	sim := issuersim.New(issuersim.Config{Now: func() time.Time { return now }})
	rec := func(id string, age time.Duration) *cellside.Record {
		return &cellside.Record{PartnerID: "p-001", TransactionID: id, State: cellside.StateSending, UpdatedAt: now.Add(-age)}
	}
	st := &memStore{recs: map[idempotency.Key]*cellside.Record{key("late"): rec("late", time.Minute), key("slow"): rec("slow", 5*time.Second)}}
	dir := &fakeDirectory{owners: map[idempotency.Key]string{key("late"): "cell-a", key("slow"): "cell-a"}}
	r, err := New(Config{Store: st, Issuer: simIssuer{sim}, Directory: dir, CellID: "cell-a", ErrNotOwner: errNotOwner,
		Now: func() time.Time { return now }, Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	if n, err := r.Once(ctx); err != nil || n != 1 {
		t.Fatalf("Once = %d, %v; want 1 resolved", n, err)
	}
	if got := st.recs[key("late")]; got.State != cellside.StateFailed || got.DeclineReason != ReasonNotReached {
		t.Fatalf("late: %s %s, want failed %s", got.State, got.DeclineReason, ReasonNotReached)
	}
	send := func(id string) (*issuerproto.AuthorizeResponse, error) {
		return sim.Authorize(ctx, &issuerproto.AuthorizeRequest{
			PartnerId: "p-001", TransactionId: id, Pan: issuersim.CardApproved, ExpiryMonth: 12, ExpiryYear: 2030,
			AmountMinorUnits: 1250, Currency: "GBP", MerchantId: "m-1", Mcc: "5411",
		})
	}
	if resp, err := send("late"); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("the late send: %v, %v; want FailedPrecondition", resp, err)
	}
	slow, err := send("slow")
	if err != nil || !slow.GetApproved() {
		t.Fatalf("the slow send: %v, %v; want approved", slow, err)
	}
	eff, err := sim.Effects(ctx, &issuerproto.EffectsRequest{Transactions: []*issuerproto.TransactionRef{
		{PartnerId: "p-001", TransactionId: "late"}, {PartnerId: "p-001", TransactionId: "slow"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if got := eff.GetEffects(); len(got) != 2 || got[0].GetEffects() != 0 || got[0].GetRequests() != 1 || got[1].GetEffects() != 1 {
		t.Fatalf("issuer effects %v; want late 0 (1 request refused), slow 1", got)
	}
	if n, err := r.Once(ctx); err != nil || n != 1 {
		t.Fatalf("second Once = %d, %v; want 1 resolved", n, err)
	}
	if got := st.recs[key("slow")]; got.State != cellside.StateApproved || got.AuthCode != slow.GetAuthCode() {
		t.Fatalf("slow: %s %s, want approved %s", got.State, got.AuthCode, slow.GetAuthCode())
	}
	if got := st.recs[key("late")].State; got != cellside.StateFailed {
		t.Fatalf("late: %s after the second round, want failed", got)
	}
}

// TestSettleDeciding: a record left deciding (its attempt ended between
// the decision's durable write and the entry's) follows the directory:
// the entry's answer when this cell's entry holds one; the decision,
// written to the entry first, when the entry is this cell's (or missing);
// abandoned when another cell holds it (it took the transaction over);
// nothing while the directory is down.
func TestSettleDeciding(t *testing.T) {
	now := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	rec := func(id, reason string) *cellside.Record {
		return &cellside.Record{PartnerID: "p-001", TransactionID: id, State: cellside.StateDeciding, DeclineReason: reason, UpdatedAt: now.Add(-time.Minute)}
	}
	st := &memStore{recs: map[idempotency.Key]*cellside.Record{
		key("in-entry"): rec("in-entry", "amount_limit"), key("ours"): rec("ours", "velocity_limit"),
		key("missing"): rec("missing", cellside.ReasonNoFXRate), key("taken"): rec("taken", "amount_limit"),
	}}
	dir := &fakeDirectory{down: true,
		owners: map[idempotency.Key]string{key("in-entry"): "cell-a", key("ours"): "cell-a", key("taken"): "cell-b"},
		final:  map[idempotency.Key]*cellpayv1.Transaction{key("in-entry"): {Status: cellpayv1.TransactionStatus_DECLINED, DeclineReason: "amount_limit"}},
	}
	iss := &fakeIssuer{}
	r, err := New(Config{Store: st, Issuer: iss, Directory: dir, CellID: "cell-a", ErrNotOwner: errNotOwner,
		Now: func() time.Time { return now }, Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	if n, _ := r.Once(context.Background()); n != 0 {
		t.Fatalf("directory down: %d settled, want 0", n)
	}
	dir.down = false
	if n, err := r.Once(context.Background()); err != nil || n != 4 {
		t.Fatalf("Once = %d, %v; want 4", n, err)
	}
	for k, w := range map[idempotency.Key]string{key("in-entry"): "declined/amount_limit", key("ours"): "declined/velocity_limit",
		key("missing"): "failed/no_fx_rate", key("taken"): "abandoned/"} {
		if got := string(st.recs[k].State) + "/" + st.recs[k].DeclineReason; got != w {
			t.Errorf("%s: %s, want %s", k, got, w)
		}
	}
	if !slices.Equal(sortedKeys(dir.finalized), []idempotency.Key{key("missing"), key("ours")}) {
		t.Errorf("finalized %v, want missing and ours", dir.finalized)
	}
	if len(iss.inquired) != 0 {
		t.Errorf("the issuer was asked about decisions made before the point of no return: %v", iss.inquired)
	}
}

func sortedKeys(ks []idempotency.Key) []idempotency.Key {
	out := slices.Clone(ks)
	slices.SortFunc(out, func(a, b idempotency.Key) int { return strings.Compare(a.TransactionID, b.TransactionID) })
	return out
}
