// Package webhook is the wire contract of Cellpay's callbacks: Standard
// Webhooks signing (headers webhook-id, webhook-timestamp and
// webhook-signature, "v1,<base64 HMAC-SHA256 over id.timestamp.body>",
// one signature per secret, space-separated, for key rotation), the
// secrets' form (whsec_<base64>), the event body, and its event IDs.
//
// Cells sign with it; partners verify with it (pkg/client's
// CallbackHandler). The HMAC itself is the Standard Webhooks reference
// library's; this package adds what that one lacks: several secrets, and a
// clock passed in for the timestamp tolerance. It never logs, and no error
// it returns quotes a secret or a signature.
package webhook

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base32"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
)

// The Standard Webhooks headers.
const (
	HeaderID        = standardwebhooks.HeaderWebhookID
	HeaderTimestamp = standardwebhooks.HeaderWebhookTimestamp
	HeaderSignature = standardwebhooks.HeaderWebhookSignature
)

// DefaultTolerance is how far a webhook-timestamp may be from the
// receiver's clock (Stripe's and Standard Webhooks' five minutes).
const DefaultTolerance = 5 * time.Minute

// Errors Verify returns; callers branch on them.
var (
	// ErrHeaders: a header is missing or malformed.
	ErrHeaders = errors.New("webhook: missing or malformed headers")
	// ErrTimestamp: the timestamp is outside the tolerance (too old: a
	// replay; too new: a clock far off).
	ErrTimestamp = errors.New("webhook: timestamp outside the tolerance")
	// ErrSignature: no signature matches any of the secrets.
	ErrSignature = errors.New("webhook: no matching signature")
	// ErrSecret: a secret is not whsec_ followed by base64.
	ErrSecret = errors.New("webhook: malformed secret")
)

const secretPrefix = "whsec_"

// NewSecret returns a new signing secret, whsec_ and the base64 of 32
// bytes from rnd (crypto/rand when nil).
func NewSecret(rnd io.Reader) (string, error) {
	if rnd == nil {
		rnd = rand.Reader
	}
	var b [32]byte
	if _, err := io.ReadFull(rnd, b[:]); err != nil {
		return "", fmt.Errorf("webhook: new secret: %w", err)
	}
	return secretPrefix + base64.StdEncoding.EncodeToString(b[:]), nil
}

func signer(secret string) (*standardwebhooks.Webhook, error) {
	if !strings.HasPrefix(secret, secretPrefix) {
		return nil, ErrSecret
	}
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, secretPrefix))
	if err != nil || len(key) == 0 {
		return nil, ErrSecret
	}
	return standardwebhooks.NewWebhookRaw(key)
}

// Sign returns the webhook-signature header for the message id sent at ts
// with body: one "v1,<signature>" per secret, in the secrets' order,
// separated by spaces.
func Sign(id string, ts time.Time, body []byte, secrets []string) (string, error) {
	if len(secrets) == 0 {
		return "", fmt.Errorf("%w: no secret", ErrSecret)
	}
	sigs := make([]string, 0, len(secrets))
	for _, s := range secrets {
		wh, err := signer(s)
		if err != nil {
			return "", err
		}
		sig, err := wh.Sign(id, ts, body)
		if err != nil {
			return "", fmt.Errorf("webhook: sign: %w", err)
		}
		sigs = append(sigs, sig)
	}
	return strings.Join(sigs, " "), nil
}

// Headers sets the three Standard Webhooks headers on h.
func Headers(h http.Header, id string, ts time.Time, body []byte, secrets []string) error {
	sig, err := Sign(id, ts, body, secrets)
	if err != nil {
		return err
	}
	h.Set(HeaderID, id)
	h.Set(HeaderTimestamp, strconv.FormatInt(ts.Unix(), 10))
	h.Set(HeaderSignature, sig)
	return nil
}

// Verify checks a delivery's headers and body against secrets (any one
// matching suffices: the sender may sign with the new secret and the old
// during a rotation), and its timestamp against now within tolerance
// (DefaultTolerance when 0). It returns the message ID and timestamp.
func Verify(h http.Header, body []byte, secrets []string, now time.Time, tolerance time.Duration) (id string, ts time.Time, err error) {
	if tolerance <= 0 {
		tolerance = DefaultTolerance
	}
	id, tsText, sig := h.Get(HeaderID), h.Get(HeaderTimestamp), h.Get(HeaderSignature)
	if id == "" || tsText == "" || sig == "" {
		return "", time.Time{}, ErrHeaders
	}
	sec, err := strconv.ParseInt(tsText, 10, 64)
	if err != nil {
		return "", time.Time{}, ErrHeaders
	}
	ts = time.Unix(sec, 0)
	if d := now.Sub(ts); d > tolerance || d < -tolerance {
		return "", time.Time{}, ErrTimestamp
	}
	for _, s := range secrets {
		wh, err := signer(s)
		if err != nil {
			return "", time.Time{}, err
		}
		// The timestamp is checked above against our clock; the library's
		// own check reads the wall clock.
		if wh.VerifyIgnoringTimestamp(body, h) == nil {
			return id, ts, nil
		}
	}
	return "", time.Time{}, ErrSignature
}

// EventTypeFinal is the type of the event every final outcome sends.
const EventTypeFinal = "transaction.final"

// Event is a callback's JSON body (the Standard Webhooks payload shape).
// Data is the transaction as cellpay.v1.Transaction in protobuf JSON with
// the proto field names: the masked card only, never a card number.
type Event struct {
	Type string `json:"type"`
	// Timestamp is when the outcome was recorded.
	Timestamp time.Time       `json:"timestamp"`
	Data      json.RawMessage `json:"data"`
}

var idEncoding = base32.StdEncoding.WithPadding(base32.NoPadding)

// EventID is the stable ID of the final-outcome event of a partner's
// transaction: the same in every cell and every attempt, so that a
// receiver drops duplicates by it.
func EventID(partnerID, transactionID string) string {
	sum := sha256.Sum256([]byte(EventTypeFinal + "\x00" + partnerID + "\x00" + transactionID))
	return "evt_" + strings.ToLower(idEncoding.EncodeToString(sum[:16]))
}
