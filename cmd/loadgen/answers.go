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
)

// answerWriter writes -answers: one line per call, the checker's answer
// plus the access point that answered. load.Run calls write from many
// goroutines.
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

// answerLine is the line for r: checker.Answer's fields, then endpoint.
func answerLine(r load.Result) ([]byte, error) {
	b, err := json.Marshal(checker.AnswerOf(r.PartnerID, r.Request.GetTransactionId(), r.Transaction, r.Err))
	if err != nil {
		return nil, err
	}
	if r.Endpoint != "" {
		ep, _ := json.Marshal(r.Endpoint)
		b = append(append(append(bytes.TrimSuffix(b, []byte("}")), `,"endpoint":`...), ep...), '}')
	}
	return append(b, '\n'), nil
}

func (a *answerWriter) write(r load.Result) {
	line, err := answerLine(r)
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
