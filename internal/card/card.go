// Package card handles primary account numbers (PANs) so that nothing else
// has to: the Luhn check, masking to first 6 and last 4, and a keyed hash for
// per-card risk checks. A full PAN must never leave this package in a log,
// error, metric, event or database row; callers keep only Mask and Hash.
package card

import (
	"crypto/hmac"
	"crypto/sha256"
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

// Mask keeps the first 6 and last 4 digits of pan and replaces the rest with
// '*'. A string of 10 characters or fewer is masked whole, so that a short or
// malformed input can never be returned as it came.
func Mask(pan string) string {
	n := len(pan)
	b := make([]byte, n)
	for i := range b {
		b[i] = '*'
	}
	if n > 10 {
		copy(b, pan[:6])
		copy(b[n-4:], pan[n-4:])
	}
	return string(b)
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
