package webhook

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"

	"github.com/cellpay/cellpay/pkg/api/cellpayv1"
)

// guideVectors is the partner guide's page of test vectors; the page is
// their source.
const guideVectors = "../../docs/partners/callbacks.md"

// vectorsMarker precedes the vectors' ```json block on the page.
const vectorsMarker = "<!-- test vectors: read by pkg/webhook/vectors_test.go -->"

// vector is one test vector as the guide prints it.
type vector struct {
	Name      string   `json:"name"`
	Secrets   []string `json:"secrets"`
	ID        string   `json:"webhook_id"`
	Timestamp string   `json:"webhook_timestamp"`
	Body      string   `json:"body"`
	Signature string   `json:"webhook_signature"`
	Valid     bool     `json:"valid"`
}

// readVectors parses the guide's test vectors.
func readVectors(t *testing.T) []vector {
	t.Helper()
	page, err := os.ReadFile(guideVectors)
	if err != nil {
		t.Fatal(err)
	}
	_, after, ok := strings.Cut(string(page), vectorsMarker+"\n```json\n")
	if !ok {
		t.Fatalf("%s: no %q followed by a ```json block", guideVectors, vectorsMarker)
	}
	block, _, ok := strings.Cut(after, "\n```\n")
	if !ok {
		t.Fatalf("%s: the vectors' block does not end", guideVectors)
	}
	dec := json.NewDecoder(strings.NewReader(block))
	dec.DisallowUnknownFields()
	var vs []vector
	if err := dec.Decode(&vs); err != nil {
		t.Fatalf("%s: the vectors: %v", guideVectors, err)
	}
	return vs
}

// guideSignature is the guide's steps, done here without this package:
// the secret's base64 after whsec_ is the key; the signature is the
// base64 of HMAC-SHA256 over "<id>.<timestamp>.<body>".
func guideSignature(t *testing.T, secret, id, ts, body string) string {
	t.Helper()
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
	if err != nil || !strings.HasPrefix(secret, "whsec_") {
		t.Fatalf("secret %q: not whsec_<base64>", secret)
	}
	m := hmac.New(sha256.New, key)
	m.Write([]byte(id + "." + ts + "." + body))
	return "v1," + base64.StdEncoding.EncodeToString(m.Sum(nil))
}

// TestGuideVectors checks the partner guide's callback test vectors
// (docs/partners/callbacks.md) against this package, so that the page and
// the code cannot drift: a valid vector's signature is what Sign makes of
// it with its secrets, in order, and what the guide's steps make; Verify
// accepts it with any one of its secrets. An invalid one is refused with
// ErrSignature. The Cellpay event's ID is EventID's, and its body is what
// a cell sends for its transaction.
func TestGuideVectors(t *testing.T) {
	vs := readVectors(t)
	if len(vs) < 5 {
		t.Fatalf("%d test vectors in %s", len(vs), guideVectors)
	}
	valid, invalid, events := 0, 0, 0
	names := map[string]bool{}
	for _, v := range vs {
		t.Run(v.Name, func(t *testing.T) {
			if v.Name == "" || names[v.Name] || len(v.Secrets) == 0 || v.ID == "" || v.Signature == "" {
				t.Fatalf("a vector without a name, a unique name, secrets, ID or signature: %+v", v)
			}
			names[v.Name] = true
			sec, err := strconv.ParseInt(v.Timestamp, 10, 64)
			if err != nil {
				t.Fatalf("webhook_timestamp %q: %v", v.Timestamp, err)
			}
			ts := time.Unix(sec, 0)
			h := http.Header{}
			h.Set(HeaderID, v.ID)
			h.Set(HeaderTimestamp, v.Timestamp)
			h.Set(HeaderSignature, v.Signature)
			if !v.Valid {
				invalid++
				if _, _, err := Verify(h, []byte(v.Body), v.Secrets, ts, 0); !errors.Is(err, ErrSignature) {
					t.Fatalf("Verify of an invalid vector: %v, want %v", err, ErrSignature)
				}
				return
			}
			valid++
			got, err := Sign(v.ID, ts, []byte(v.Body), v.Secrets)
			if err != nil || got != v.Signature {
				t.Fatalf("Sign = %q, %v; the guide says %q", got, err, v.Signature)
			}
			var steps []string
			for _, s := range v.Secrets {
				steps = append(steps, guideSignature(t, s, v.ID, v.Timestamp, v.Body))
			}
			if joined := strings.Join(steps, " "); joined != v.Signature {
				t.Fatalf("the guide's steps give %q; the vector says %q", joined, v.Signature)
			}
			for _, s := range v.Secrets {
				id, at, err := Verify(h, []byte(v.Body), []string{s}, ts.Add(time.Minute), 0)
				if err != nil || id != v.ID || !at.Equal(ts) {
					t.Fatalf("Verify with one of its secrets: %q, %v, %v", id, at, err)
				}
			}
			if _, _, err := Verify(h, []byte(v.Body), v.Secrets, ts.Add(DefaultTolerance+time.Second), 0); !errors.Is(err, ErrTimestamp) {
				t.Fatalf("Verify past the tolerance: %v, want %v", err, ErrTimestamp)
			}
			if isCellpayEvent(t, v) {
				events++
			}
		})
	}
	if valid < 2 || invalid < 2 || events == 0 {
		t.Fatalf("%d valid vectors, %d invalid, %d of Cellpay's events: want some of each", valid, invalid, events)
	}
}

// isCellpayEvent reports whether v's body is a Cellpay event, and checks
// that it is what a cell sends for its transaction: the body as the
// outbox renders it (the transaction in protobuf JSON with the protos'
// names, in an Event), under the transaction's EventID.
func isCellpayEvent(t *testing.T, v vector) bool {
	t.Helper()
	var ev Event
	if err := json.Unmarshal([]byte(v.Body), &ev); err != nil || ev.Type != EventTypeFinal {
		return false
	}
	var txn cellpayv1.Transaction
	if err := protojson.Unmarshal(ev.Data, &txn); err != nil {
		t.Fatalf("the event's data: %v", err)
	}
	data, err := protojson.MarshalOptions{UseProtoNames: true}.Marshal(&txn)
	if err != nil {
		t.Fatal(err)
	}
	body, err := json.Marshal(Event{Type: EventTypeFinal, Timestamp: ev.Timestamp, Data: data})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(body, []byte(v.Body)) {
		t.Fatalf("the event's body is not as a cell renders it:\n got %s\nwant %s", v.Body, body)
	}
	if want := EventID(txn.GetPartnerId(), txn.GetTransactionId()); v.ID != want {
		t.Fatalf("webhook_id %q; the event of %s/%s is %q", v.ID, txn.GetPartnerId(), txn.GetTransactionId(), want)
	}
	if strings.Contains(v.Body, `"pan"`) {
		t.Fatal("an event's body holds a card number field")
	}
	return true
}
