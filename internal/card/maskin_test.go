package card

import (
	"strings"
	"testing"
)

func TestMaskIn(t *testing.T) {
	for in, want := range map[string]string{
		`invalid value for string field pan: 4111111111111111`: `invalid value for string field pan: 411111******1111`,
		`unexpected token "4111 1111 1111 1111"`:               `unexpected token "411111******1111"`,
		`unknown field "4111-1111-1111-1111"`:                  `unknown field "411111******1111"`,
		`(line 1:16): minorUnits: "1250" of 12 digits`:         `(line 1:16): minorUnits: "1250" of 12 digits`,
		`ids 12345678901 and 2026-12-06`:                       `ids 12345678901 and 2026-12-06`,
		`a 12-digit 123456789012.`:                             `a 12-digit 1234******12.`,
		`trailing 4111111111111111`:                            `trailing 411111******1111`,
		``:                                                     ``,
	} {
		if got := MaskIn(in); got != want {
			t.Errorf("MaskIn(%q) = %q, want %q", in, got, want)
		}
	}
}

// FuzzMaskIn: no run of 12 or more digits is ever left whole (at most 11 in a row), and text
// without one comes back as it was.
func FuzzMaskIn(f *testing.F) {
	f.Add("pan: 4111111111111111")
	f.Add("4111 1111 1111 1111 and 12 34")
	f.Fuzz(func(t *testing.T, s string) {
		out := MaskIn(s)
		run := 0
		for i := 0; i < len(out); i++ {
			if isDigit(out[i]) {
				if run++; run > 11 {
					t.Fatalf("MaskIn(%q) = %q: %d digits shown in a row", s, out, run)
				}
			} else {
				run = 0
			}
		}
		if !strings.ContainsAny(s, "0123456789") && out != s {
			t.Fatalf("MaskIn(%q) changed text without digits: %q", s, out)
		}
	})
}
