package console

import (
	"context"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc"

	"github.com/cellpay/cellpay/cmd/gtr/internal/refusals"
	"github.com/cellpay/cellpay/internal/iso"
	"github.com/cellpay/cellpay/pkg/adminproto"
	"github.com/cellpay/cellpay/pkg/cellproto"
	"github.com/cellpay/cellpay/pkg/idempotency"
)

// txnJSON is a transaction as every cell holds it (the Admin API's
// FindTransaction), shaped for the page: the cells that hold a record
// first, by the GTR's attempt that wrote it (the history of its
// re-routes), then the others in the table's order.
type txnJSON struct {
	Partner string `json:"partner"`
	ID      string `json:"id"`
	// Summary says in a line where it was decided, where it stepped back
	// and which cells did not answer.
	Summary string `json:"summary"`
	// DecidedBy is the cell whose record is final (approved, declined,
	// failed); "" while none is.
	DecidedBy string `json:"decided_by,omitempty"`
	// Complete is true when every cell answered.
	Complete bool          `json:"complete"`
	Cells    []txnCellJSON `json:"cells"`
}

// txnCellJSON is one cell's answer: its record, or its error. Never the
// card number (the API gives the masked PAN only), a token or a secret.
type txnCellJSON struct {
	Cell  string `json:"cell"`
	Error string `json:"error,omitempty"` // the cell did not answer
	Found bool   `json:"found"`
	// Step is the record's part in the transaction's history: "decided"
	// (a final state), "stepped back" (abandoned before its point of no
	// return: re-routed), "at the issuer" (sending: outcome not known
	// yet), "in progress" (received, deciding); "" without a record.
	Step        string         `json:"step,omitempty"`
	State       string         `json:"state,omitempty"`
	Attempt     int32          `json:"attempt,omitempty"`
	Rule        string         `json:"rule,omitempty"`
	Reason      string         `json:"reason,omitempty"`
	AuthCode    string         `json:"auth_code,omitempty"`
	Amount      string         `json:"amount,omitempty"` // "12.50 EUR"
	AmountMinor int64          `json:"amount_minor_units,omitempty"`
	Currency    string         `json:"currency,omitempty"`
	PaymentType string         `json:"payment_type,omitempty"`
	MaskedPAN   string         `json:"masked_pan,omitempty"`
	Created     *time.Time     `json:"created,omitempty"`
	Updated     *time.Time     `json:"updated,omitempty"`
	Unfiled     bool           `json:"unfiled,omitempty"` // decided while the directory was away
	Callbacks   []callbackJSON `json:"callbacks,omitempty"`
}

// callbackJSON is one callback event's delivery: never its body, its
// endpoint or a secret.
type callbackJSON struct {
	EventID   string `json:"event_id"`
	Status    string `json:"status"` // pending, delivered, dead
	Attempts  int32  `json:"attempts"`
	LastError string `json:"last_error,omitempty"`
}

// step is a record's part in its transaction's history, by its state.
func step(state string) string {
	switch state {
	case "approved", "declined", "failed":
		return "decided"
	case "abandoned":
		return "stepped back"
	case "sending":
		return "at the issuer"
	case "received", "deciding":
		return "in progress"
	}
	return state
}

// amountText is minor units in the currency's major unit: 1250 EUR is
// "12.50 EUR"; a currency not known here keeps its minor units.
func amountText(minor int64, cur string) string {
	e, ok := iso.CurrencyExponent(cur)
	if !ok || e == 0 {
		return strconv.FormatInt(minor, 10) + " " + cur
	}
	sign, u := "", uint64(minor)
	if minor < 0 {
		sign, u = "-", uint64(-minor)
	}
	p := uint64(1)
	for range e {
		p *= 10
	}
	return fmt.Sprintf("%s%d.%0*d %s", sign, u/p, e, u%p, cur)
}

func txnCellView(c *adminproto.CellTransaction) txnCellJSON {
	cj := txnCellJSON{Cell: c.GetCellId(), Error: c.GetError()}
	r := c.GetRecord()
	if cj.Error != "" || !r.GetFound() {
		return cj
	}
	cj.Found, cj.State, cj.Step, cj.Attempt = true, r.GetState(), step(r.GetState()), r.GetAttempt()
	cj.Rule, cj.Reason, cj.AuthCode = r.GetRouteRule(), r.GetDeclineReason(), r.GetAuthCode()
	cj.AmountMinor, cj.Currency, cj.PaymentType, cj.MaskedPAN = r.GetAmountMinorUnits(), r.GetCurrency(), r.GetPaymentType(), r.GetMaskedPan()
	if cj.Currency != "" {
		cj.Amount = amountText(cj.AmountMinor, cj.Currency)
	}
	cj.Unfiled = r.GetUnfiled()
	if t := r.GetCreatedAt(); t != nil {
		v := t.AsTime()
		cj.Created = &v
	}
	if t := r.GetUpdatedAt(); t != nil {
		v := t.AsTime()
		cj.Updated = &v
	}
	for _, e := range r.GetCallbacks() {
		cj.Callbacks = append(cj.Callbacks, callbackView(e))
	}
	return cj
}

func callbackView(e *cellproto.CallbackEvent) callbackJSON {
	return callbackJSON{EventID: e.GetEventId(), Status: e.GetStatus(), Attempts: e.GetAttempts(), LastError: e.GetLastError()}
}

// txnView orders the cells' answers and sums them up.
func txnView(resp *adminproto.FindTransactionResponse) txnJSON {
	t := txnJSON{Partner: resp.GetPartnerId(), ID: resp.GetTransactionId(), Complete: true, Cells: []txnCellJSON{}}
	for _, c := range resp.GetCells() {
		t.Cells = append(t.Cells, txnCellView(c))
	}
	sort.SliceStable(t.Cells, func(i, j int) bool {
		a, b := t.Cells[i], t.Cells[j]
		if a.Found != b.Found {
			return a.Found
		}
		return a.Found && a.Attempt < b.Attempt
	})
	var decided, current *txnCellJSON
	var back, silent []string
	for i := range t.Cells {
		c := &t.Cells[i]
		switch {
		case c.Error != "":
			t.Complete = false
			silent = append(silent, c.Cell)
		case !c.Found:
		case c.Step == "decided":
			decided = c // the latest attempt's, were there two
		case c.Step == "stepped back":
			back = append(back, fmt.Sprintf("%s (attempt %d)", c.Cell, c.Attempt))
		default:
			current = c
		}
	}
	var parts []string
	switch {
	case decided != nil:
		t.DecidedBy = decided.Cell
		parts = append(parts, fmt.Sprintf("%s by %s on attempt %d", decided.State, decided.Cell, decided.Attempt))
	case current != nil && current.State == "sending":
		parts = append(parts, fmt.Sprintf("at the issuer through %s (attempt %d): outcome not known yet", current.Cell, current.Attempt))
	case current != nil:
		parts = append(parts, fmt.Sprintf("in progress in %s (attempt %d, %s)", current.Cell, current.Attempt, current.State))
	case len(back) > 0:
		parts = append(parts, "not decided: every attempt found stepped back")
	default:
		parts = append(parts, "no cell that answered holds it")
	}
	if len(back) > 0 {
		parts = append(parts, "stepped back from "+strings.Join(back, ", "))
	}
	if len(silent) > 0 {
		parts = append(parts, "did not answer: "+strings.Join(silent, ", ")+" (it may hold more)")
	}
	t.Summary = strings.Join(parts, "; ")
	return t
}

// txn finds a transaction in every cell: GET /api/txn?partner=P&id=T.
func (h *Handler) txn(w http.ResponseWriter, r *http.Request, s session) {
	q := r.URL.Query()
	partner, id := q.Get("partner"), q.Get("id")
	for _, p := range []struct{ name, v string }{{"partner", partner}, {"id", id}} {
		if err := idempotency.ValidateKey(p.v); err != nil {
			writeError(w, http.StatusBadRequest, p.name+": "+err.Error())
			return
		}
	}
	var resp *adminproto.FindTransactionResponse
	if h.call(w, r, s, func(ctx context.Context, opt grpc.CallOption) (err error) {
		resp, err = h.cfg.Admin.FindTransaction(ctx, &adminproto.FindTransactionRequest{PartnerId: partner, TransactionId: id}, opt)
		return err
	}) {
		return
	}
	writeJSON(w, http.StatusOK, txnView(resp))
}

// ref finds a refused call by the reference a partner quotes, on every
// GTR replica: GET /api/ref?id=R (the Admin API's FindReference). A
// refusal naming a transaction links to its search.
func (h *Handler) ref(w http.ResponseWriter, r *http.Request, s session) {
	id := r.URL.Query().Get("id")
	var resp *adminproto.FindReferenceResponse
	if h.call(w, r, s, func(ctx context.Context, opt grpc.CallOption) (err error) {
		resp, err = h.cfg.Admin.FindReference(ctx, &adminproto.FindReferenceRequest{RequestId: id}, opt)
		return err
	}) {
		return
	}
	out := make([]refusals.Refusal, 0, len(resp.GetRefusals()))
	for _, f := range resp.GetRefusals() {
		out = append(out, refusals.Refusal{Replica: f.GetReplica(), RequestID: f.GetRequestId(), Time: f.GetTime().AsTime(), Method: f.GetMethod(),
			PartnerID: f.GetPartnerId(), TransactionID: f.GetTransactionId(), Code: f.GetCode(), Reason: f.GetReason(), Message: f.GetMessage()})
	}
	writeJSON(w, http.StatusOK, map[string]any{"refusals": out, "replicas": resp.GetReplicas()})
}
