package cardkeys

import (
	"encoding/hex"
	"regexp"
	"strings"
	"testing"
)

// parseErr is every error Parse may give: a line's number, never its text.
var parseErr = regexp.MustCompile(`^cardkeys: (line [0-9]+: not hex|no master secret)$`)

// FuzzParse: a card key file, as read from disk, into the ring. Whatever
// the file holds, Parse and New answer without panicking; an error names
// a line by its number and never quotes it (a line may be a master
// secret, or most of one); what Parse accepts, written back one hex master a line, parses to
// the same masters; and a ring New builds derives keys for a PAN.
func FuzzParse(f *testing.F) {
	f.Add([]byte("# current\n" + strings.Repeat("ab", 32) + "\n" + strings.Repeat("cd", 32) + "\n"))
	f.Add([]byte(strings.Repeat("ab", 31) + "z\n"))
	f.Add([]byte("\n\n# none\n"))
	f.Add([]byte(strings.Repeat("00", 32) + "\r\n" + strings.Repeat("00", 32)))
	f.Add([]byte("abc"))
	f.Fuzz(func(t *testing.T, text []byte) {
		masters, err := Parse(text)
		if err != nil {
			if !parseErr.MatchString(err.Error()) {
				t.Fatalf("the error %q says more than a line's number", err)
			}
			return
		}
		var again strings.Builder
		for _, m := range masters {
			again.WriteString(hex.EncodeToString(m) + "\n")
		}
		back, err := Parse([]byte(again.String()))
		if err != nil || len(back) != len(masters) {
			t.Fatalf("written back, %d masters parse to %d: %v", len(masters), len(back), err)
		}
		for i := range back {
			if hex.EncodeToString(back[i]) != hex.EncodeToString(masters[i]) {
				t.Fatalf("master %d changed when written back", i)
			}
		}
		r, err := New(masters...)
		if err != nil {
			return
		}
		if hs := r.PANHashes("4242424242424242"); len(hs) == 0 || hs[0].KeyID != r.PANHashKeyID() {
			t.Fatalf("a ring of %d masters hashes a PAN under %v, want its current key first", len(masters), hs)
		}
	})
}
