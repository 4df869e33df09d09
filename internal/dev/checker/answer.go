package checker

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/cellpay/cellpay/pkg/api/cellpayv1"
	"github.com/cellpay/cellpay/pkg/idempotency"
)

// Answer is what a partner was told for one SubmitTransaction call. Code is
// the gRPC code: codes.OK with a Status, or the error's code and no Status.
// A transaction is (PartnerID, ID): transaction IDs are a namespace per
// partner. A transaction submitted more than once has one Answer per call.
type Answer struct {
	PartnerID     string
	ID            string
	Status        cellpayv1.TransactionStatus
	AuthCode      string
	DeclineReason string
	CellID        string
	Code          codes.Code
	// Message is the error's message, for the reader of a failed run (the
	// GTR's generic message names a reference its log has the details
	// under); never compared.
	Message string
	// Amounts says the answer carried an amount: Amount and Currency,
	// in minor units, and for an authorization its approved follow-ups'
	// sums as of the answer (Captured, Refunded, Voided). An answer
	// without one (an error, a file written before amounts were kept,
	// the simulator's) has its amounts not judged.
	Amounts            bool
	Amount             int64
	Currency           string
	Captured, Refunded int64
	Voided             bool
}

// AnswerOf turns the outcome of one SubmitTransaction call for partner's
// transaction id into an Answer.
func AnswerOf(partner, id string, txn *cellpayv1.Transaction, err error) Answer {
	if err != nil {
		st := status.Convert(err)
		return Answer{PartnerID: partner, ID: id, Code: st.Code(), Message: st.Message()}
	}
	return Answer{
		PartnerID:     partner,
		ID:            id,
		Status:        txn.GetStatus(),
		AuthCode:      txn.GetAuthCode(),
		DeclineReason: txn.GetDeclineReason(),
		CellID:        txn.GetCellId(),
		Amounts:       txn.GetAmount() != nil,
		Amount:        txn.GetAmount().GetMinorUnits(),
		Currency:      txn.GetAmount().GetCurrency(),
		Captured:      txn.GetCapturedAmount().GetMinorUnits(),
		Refunded:      txn.GetRefundedAmount().GetMinorUnits(),
		Voided:        txn.GetVoided(),
	}
}

// Err reports whether the call failed with a gRPC error.
func (a Answer) Err() bool { return a.Code != codes.OK }

// Key is the transaction a is about.
func (a Answer) Key() idempotency.Key {
	return idempotency.Key{PartnerID: a.PartnerID, TransactionID: a.ID}
}

// answerJSON is an Answer on the wire: status and code by name, so the file
// reads well and survives renumbering.
type answerJSON struct {
	PartnerID     string `json:"partner_id"`
	ID            string `json:"id"`
	Status        string `json:"status,omitempty"`
	AuthCode      string `json:"auth_code,omitempty"`
	DeclineReason string `json:"decline_reason,omitempty"`
	CellID        string `json:"cell_id,omitempty"`
	Code          string `json:"code"`
	Message       string `json:"message,omitempty"`
	Amounts       bool   `json:"amounts,omitempty"`
	Amount        int64  `json:"amount,omitempty"`
	Currency      string `json:"currency,omitempty"`
	Captured      int64  `json:"captured,omitempty"`
	Refunded      int64  `json:"refunded,omitempty"`
	Voided        bool   `json:"voided,omitempty"`
}

// codeNames are the canonical gRPC code names, as docs/design/README.md spells them
// (codes.Code.String says "Canceled", "InvalidArgument").
var codeNames = [...]string{
	"OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED",
	"NOT_FOUND", "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED",
	"FAILED_PRECONDITION", "ABORTED", "OUT_OF_RANGE", "UNIMPLEMENTED",
	"INTERNAL", "UNAVAILABLE", "DATA_LOSS", "UNAUTHENTICATED",
}

// CodeName is the canonical upper-case name of c, or its number for codes
// outside the standard set.
func CodeName(c codes.Code) string {
	if int(c) < len(codeNames) {
		return codeNames[c]
	}
	return strconv.FormatUint(uint64(c), 10)
}

func parseCode(s string) (codes.Code, error) {
	for i, n := range codeNames {
		if n == s {
			return codes.Code(i), nil
		}
	}
	if n, err := strconv.ParseUint(s, 10, 32); err == nil {
		return codes.Code(n), nil
	}
	return 0, fmt.Errorf("unknown gRPC code %q", s)
}

// MarshalJSON writes a as one object with status and code by name.
func (a Answer) MarshalJSON() ([]byte, error) {
	w := answerJSON{PartnerID: a.PartnerID, ID: a.ID, AuthCode: a.AuthCode, DeclineReason: a.DeclineReason, CellID: a.CellID, Code: CodeName(a.Code), Message: a.Message,
		Amounts: a.Amounts, Amount: a.Amount, Currency: a.Currency, Captured: a.Captured, Refunded: a.Refunded, Voided: a.Voided}
	if a.Status != cellpayv1.TransactionStatus_TRANSACTION_STATUS_UNSPECIFIED {
		w.Status = a.Status.String()
	}
	return json.Marshal(w)
}

// UnmarshalJSON reads what MarshalJSON writes. A missing code means OK; a
// missing partner_id is an error, since an ID alone names no transaction.
func (a *Answer) UnmarshalJSON(b []byte) error {
	var w answerJSON
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	if w.ID == "" {
		return errors.New("answer without an id")
	}
	if w.PartnerID == "" {
		return fmt.Errorf("answer %s without a partner_id", w.ID)
	}
	name := w.PartnerID + "/" + w.ID
	var out Answer
	out.PartnerID, out.ID, out.AuthCode, out.DeclineReason, out.CellID, out.Message = w.PartnerID, w.ID, w.AuthCode, w.DeclineReason, w.CellID, w.Message
	out.Amounts, out.Amount, out.Currency, out.Captured, out.Refunded, out.Voided = w.Amounts, w.Amount, w.Currency, w.Captured, w.Refunded, w.Voided
	if w.Status != "" {
		v, ok := cellpayv1.TransactionStatus_value[w.Status]
		if !ok {
			return fmt.Errorf("answer %s: unknown status %q", name, w.Status)
		}
		out.Status = cellpayv1.TransactionStatus(v)
	}
	if w.Code != "" {
		c, err := parseCode(w.Code)
		if err != nil {
			return fmt.Errorf("answer %s: %w", name, err)
		}
		out.Code = c
	}
	if out.Code == codes.OK && out.Status == cellpayv1.TransactionStatus_TRANSACTION_STATUS_UNSPECIFIED {
		return fmt.Errorf("answer %s: code OK needs a status", name)
	}
	*a = out
	return nil
}

// WriteAnswer writes a as one JSON line. It is safe to call from several
// goroutines only if w is (wrap a shared file in a mutex).
func WriteAnswer(w io.Writer, a Answer) error {
	b, err := json.Marshal(a)
	if err != nil {
		return fmt.Errorf("checker: write answer: %w", err)
	}
	b = append(b, '\n')
	if _, err := w.Write(b); err != nil {
		return fmt.Errorf("checker: write answer: %w", err)
	}
	return nil
}

// ReadAnswers reads a JSON Lines file of answers, as WriteAnswer writes
// them. Blank lines are skipped; a bad line fails the read, naming its
// number.
func ReadAnswers(r io.Reader) ([]Answer, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64*1024), 1<<20)
	var out []Answer
	for line := 1; sc.Scan(); line++ {
		b := sc.Bytes()
		if len(bytes.TrimSpace(b)) == 0 {
			continue
		}
		var a Answer
		if err := json.Unmarshal(b, &a); err != nil {
			return nil, fmt.Errorf("checker: answers line %d: %w", line, err)
		}
		out = append(out, a)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("checker: answers: %w", err)
	}
	return out, nil
}
