package webhook

import (
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

// FuzzVerify: a receiver's check of a delivery, with every header and the
// body from the network. Whatever arrives, Verify answers without
// panicking; it accepts only a delivery that carries our signature of
// exactly that ID, timestamp and body; and a body changed by one byte is
// refused.
func FuzzVerify(f *testing.F) {
	secret := specSecret
	now := time.Unix(1_700_000_000, 0)
	body := []byte(`{"type":"transaction.final","data":{}}`)
	good := http.Header{}
	if err := Headers(good, "evt_1", now, body, []string{secret}); err != nil {
		f.Fatal(err)
	}
	f.Add(good.Get(HeaderID), good.Get(HeaderTimestamp), good.Get(HeaderSignature), body)
	f.Add("evt_1", "1700000000", "v1,AAAA v1a,BBBB", body)
	f.Add("", "", "", []byte{})
	f.Add("evt_\x00", "-9223372036854775808", "v1,"+strings.Repeat("=", 64), []byte("\xff\xfe"))
	f.Add("evt_1", "99999999999999999999", "v1", body)
	f.Fuzz(func(t *testing.T, id, ts, sig string, body []byte) {
		h := http.Header{}
		h.Set(HeaderID, id)
		h.Set(HeaderTimestamp, ts)
		h.Set(HeaderSignature, sig)
		gotID, gotTS, err := Verify(h, body, []string{secret}, now, 0)
		if err != nil {
			return
		}
		if sec, _ := strconv.ParseInt(h.Get(HeaderTimestamp), 10, 64); gotID != h.Get(HeaderID) || gotTS.Unix() != sec {
			t.Fatalf("accepted with id %q ts %v from headers %v", gotID, gotTS, h)
		}
		want, err := Sign(gotID, gotTS, body, []string{secret})
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(h.Get(HeaderSignature), strings.TrimPrefix(want, "v1,")) {
			t.Fatalf("accepted signature %q, not ours (%q) of id %q ts %v", h.Get(HeaderSignature), want, gotID, gotTS)
		}
		if _, _, err := Verify(h, append(body[:len(body):len(body)], 'x'), []string{secret}, now, 0); err == nil {
			t.Fatal("accepted the body with a byte appended")
		}
	})
}
