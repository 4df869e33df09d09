// Package card handles primary account numbers (PANs) so that nothing else
// has to: the Luhn check, masking (first 6 and last 4 at most, fewer for a PAN
// shorter than 16 digits: see Mask), and a keyed hash for
// per-card risk checks. A full PAN must never leave this package in a log,
// error, metric, event or database row; callers keep only Mask and Hash.
package card

import (
	"crypto/hmac"
	"crypto/sha256"
	"strings"
)

// Luhn reports whether s is all digits and passes the Luhn (mod 10) check.
func Luhn(s string) bool {
	if s == "" {
		return false
	}
	sum := 0
	double := false
	for i := len(s) - 1; i >= 0; i-- {
		c := s[i]
		if c < '0' || c > '9' {
			return false
		}
		d := int(c - '0')
		if double {
			d *= 2
			if d > 9 {
				d -= 9
			}
		}
		sum += d
		double = !double
	}
	return sum%10 == 0
}

// CheckDigit returns the digit that makes body followed by it pass the
// Luhn check. body must be all digits.
func CheckDigit(body string) byte {
	sum := 0
	// The check digit will be rightmost, so the last body digit is doubled.
	for i := len(body) - 1; i >= 0; i-- {
		d := int(body[i] - '0')
		if (len(body)-1-i)%2 == 0 {
			d *= 2
			if d > 9 {
				d -= 9
			}
		}
		sum += d
	}
	return byte('0' + (10-sum%10)%10)
}

// Mask hides the middle of pan with '*'. A PAN of 16 digits or more keeps
// its first 6 and last 4 (the most PCI DSS allows); a shorter one shows
// fewer, so that at least 6 digits are always hidden: n-6 digits are shown,
// at most 10, of which at most 6 first and the rest last.
//
//	length  12  13  14  15  16..19
//	first    4   5   6   6   6
//	last     2   2   2   3   4
//
// A string of 11 characters or fewer (shorter than any PAN the API
// accepts) is masked whole, so that a short or malformed input can never
// be returned as it came.
func Mask(pan string) string {
	n := len(pan)
	b := make([]byte, n)
	for i := range b {
		b[i] = '*'
	}
	first, last := MaskShown(n)
	copy(b, pan[:first])
	copy(b[n-last:], pan[n-last:])
	return string(b)
}

// MaskShown returns how many leading and trailing characters Mask leaves
// visible in a string of n characters.
func MaskShown(n int) (first, last int) {
	if n < 12 {
		return 0, 0
	}
	shown := min(10, n-6)
	first = min(6, shown-2)
	return first, shown - first
}

// Hasher computes keyed hashes of PANs. The key keeps the hash from being
// reversed by enumerating the (small) space of PANs that share a BIN and last
// four digits; it is the cell's secret and is never stored beside the hashes.
type Hasher struct {
	key []byte
}

// NewHasher returns a Hasher for key, which should be at least 32 random bytes.
func NewHasher(key []byte) *Hasher {
	return &Hasher{key: append([]byte(nil), key...)}
}

// Hash returns HMAC-SHA256(key, pan).
func (h *Hasher) Hash(pan string) []byte {
	m := hmac.New(sha256.New, h.key)
	m.Write([]byte(pan))
	return m.Sum(nil)
}

// KeyedHash is a PAN's hash under one key, with the ID of that key (never
// the key itself), as rows store it: velocity checks match both.
type KeyedHash struct {
	KeyID string
	Sum   []byte
}

// MaskIn returns s with every run of 12 or more digits in it (a PAN's
// length; single spaces or hyphens between digits count as part of the
// run, as a card number is often written) masked by Mask, for text that
// may quote what a caller sent: a decoder's error, say.
func MaskIn(s string) string {
	var b strings.Builder
	masked := false
	for i := 0; i < len(s); {
		if !isDigit(s[i]) {
			b.WriteByte(s[i])
			i++
			continue
		}
		var digits []byte
		end := i
		for j := i; j < len(s); j++ {
			if isDigit(s[j]) {
				digits = append(digits, s[j])
				end = j + 1
			} else if (s[j] != ' ' && s[j] != '-') || j+1 >= len(s) || !isDigit(s[j+1]) {
				break
			}
		}
		if len(digits) >= 12 {
			b.WriteString(Mask(string(digits)))
			masked = true
		} else {
			b.WriteString(s[i:end])
		}
		i = end
	}
	if !masked {
		return s
	}
	return b.String()
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }
