package auth

import (
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/metadata"

	"github.com/cellpay/cellpay/internal/partners"
)

// FuzzFromHeader: the tap's authentication of a call's authorization
// header values, read off the network before anything else: it never
// panics; it names a partner only for one value of the bearer scheme
// whose key is that partner's; anything else gets one of the
// interceptor's errors, which never quote what was sent.
func FuzzFromHeader(f *testing.F) {
	plain, key, err := partners.NewKey(nil, time.Now())
	if err != nil {
		f.Fatal(err)
	}
	ix, err := partners.Compile(&partners.Registry{Version: 1, Partners: []partners.Partner{{ID: "a", Status: partners.StatusActive, Keys: []partners.Key{key}}}})
	if err != nil {
		f.Fatal(err)
	}
	a := &Partners{Index: func() *partners.Index { return ix }}
	for _, seed := range [][2]string{
		{"Bearer " + plain, ""}, {"bearer  " + plain + " ", ""}, {"Basic " + plain, ""}, {"Bearer " + plain, "Bearer " + plain},
		{"Bearer", ""}, {"", ""}, {"Bearer " + plain[:len(plain)-1], ""}, {"Bearer \x00" + plain, ""},
	} {
		f.Add(seed[0], seed[1])
	}
	f.Fuzz(func(t *testing.T, v1, v2 string) {
		md := metadata.MD{}
		if v1 != "" {
			md.Append("authorization", v1)
		}
		if v2 != "" {
			md.Append("authorization", v2)
		}
		p, err := a.FromHeader(md)
		if err == nil {
			scheme, k, _ := strings.Cut(v1, " ")
			if p == nil || p.ID != "a" || v2 != "" || !strings.EqualFold(scheme, "bearer") || strings.TrimSpace(k) != plain {
				t.Fatalf("accepted %q, %q as %v", v1, v2, p)
			}
			return
		}
		if p != nil {
			t.Fatalf("a partner with an error: %v, %v", p, err)
		}
		// The errors are fixed texts: none can quote what was sent.
		if err != errNoKey && err != errBadKey && err != errSuspended {
			t.Fatalf("an error of no known kind: %v", err)
		}
	})
}
