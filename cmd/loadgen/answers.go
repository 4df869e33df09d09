package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"sync"

	"github.com/cellpay/cellpay/internal/dev/checker"
	"github.com/cellpay/cellpay/internal/dev/load"
	"github.com/cellpay/cellpay/pkg/api/cellpayv1"
)

// answerWriter writes -answers: one line per call, the checker's answer
// plus the access point that answered, or, for a follow-up, its kind and
// the authorization it follows. load.Run calls it from many goroutines.
type answerWriter struct {
	mu  sync.Mutex
	f   *os.File
	w   *bufio.Writer
	err error
}

func createAnswers(path string) (*answerWriter, error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("-answers: %w", err)
	}
	return &answerWriter{f: f, w: bufio.NewWriter(f)}, nil
}

// field is one field a line adds to checker.Answer's: a name and a
// value, left out when nil or "".
type field struct {
	name  string
	value any
}

// answerLine is the line of a: checker.Answer's fields (which the
// checker reads; it ignores the others), then extra in order.
func answerLine(a checker.Answer, extra ...field) ([]byte, error) {
	b, err := json.Marshal(a)
	if err != nil {
		return nil, err
	}
	for _, f := range extra {
		if f.value == nil || f.value == "" {
			continue
		}
		name, _ := json.Marshal(f.name)
		v, err := json.Marshal(f.value)
		if err != nil {
			return nil, err
		}
		b = append(append(append(append(bytes.TrimSuffix(b, []byte("}")), ','), name...), ':'), v...)
		b = append(b, '}')
	}
	return append(b, '\n'), nil
}

// write is load.Run's OnResult: a submit's answer, with the endpoint that
// answered it.
func (a *answerWriter) write(r load.Result) {
	a.add(answerLine(checker.AnswerOf(r.PartnerID, r.Request.GetTransactionId(), r.Transaction, r.Err), field{"endpoint", r.Endpoint}))
}

// writeFollowUp is load.Run's OnFollowUp: a follow-up's answer, with its
// kind (follow_up: CAPTURE, VOID or REFUND), its authorization's ID
// (original) and the amount it asked for in minor units of the
// authorization's currency (amount; none for a void).
func (a *answerWriter) writeFollowUp(f load.FollowUpResult) {
	var amount any
	if f.Kind != cellpayv1.PaymentType_VOID {
		amount = f.Amount
	}
	a.add(answerLine(checker.AnswerOf(f.PartnerID, f.ID, f.Transaction, f.Err),
		field{"follow_up", f.Kind.String()}, field{"original", f.Original}, field{"amount", amount}))
}

// add writes line, or keeps the first error.
func (a *answerWriter) add(line []byte, err error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.err != nil {
		return
	}
	if err == nil {
		_, err = a.w.Write(line)
	}
	a.err = err
}

func (a *answerWriter) close() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	err := a.err
	if ferr := a.w.Flush(); err == nil {
		err = ferr
	}
	if cerr := a.f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("-answers: %w", err)
	}
	return nil
}
