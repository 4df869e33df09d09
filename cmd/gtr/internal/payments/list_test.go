package payments

import (
	"testing"
	"time"
)

func TestPageToken(t *testing.T) {
	at := time.Date(2026, 12, 7, 1, 2, 3, 456789000, time.UTC)
	got, id, err := decodePageToken(encodePageToken(at, "t-1.x_y"))
	if err != nil || !got.Equal(at) || id != "t-1.x_y" {
		t.Fatalf("round trip: %v %q %v", got, id, err)
	}
	for _, bad := range []string{"", "!", "MQ", encodePageToken(at, "bad id"), "Mg" + encodePageToken(at, "t")[2:]} {
		if _, _, err := decodePageToken(bad); err == nil {
			t.Errorf("%q decoded", bad)
		}
	}
}

// FuzzPageToken: a token from outside never panics the decoder, and one
// it accepts encodes back to itself.
func FuzzPageToken(f *testing.F) {
	f.Add(encodePageToken(time.Unix(1, 2), "t-1"))
	f.Add("")
	f.Add("MQAAAAAAAAAA")
	f.Fuzz(func(t *testing.T, tok string) {
		at, id, err := decodePageToken(tok)
		if err != nil {
			return
		}
		if again := encodePageToken(at, id); again != tok {
			t.Fatalf("%q decoded to (%v, %q), which encodes as %q", tok, at, id, again)
		}
	})
}
