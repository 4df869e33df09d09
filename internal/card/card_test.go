package card

import (
	"bytes"
	"strings"
	"testing"
)

func TestLuhn(t *testing.T) {
	cases := []struct {
		pan  string
		want bool
	}{
		{"4242424242424242", true},
		{"4000000000000002", true},
		{"5555555555554444", true},
		{"378282246310005", true},
		{"4242424242424241", false},
		{"", false},
		{"42424242a4242424", false},
		{"0", true},
	}
	for _, c := range cases {
		if got := Luhn(c.pan); got != c.want {
			t.Errorf("Luhn(%q) = %v, want %v", c.pan, got, c.want)
		}
	}
}

func TestMask(t *testing.T) {
	cases := []struct{ pan, want string }{
		{"4242424242424242", "424242******4242"},
		{"378282246310005", "378282******005"},
		{"123456789012", "1234******12"},
		{"1234567890123", "12345******23"},
		{"12345678901234", "123456******34"},
		{"1234567890123456789", "123456*********6789"},
		{"12345678901", "***********"},
		{"1234567890", "**********"},
		{"", ""},
	}
	for _, c := range cases {
		if got := Mask(c.pan); got != c.want {
			t.Errorf("Mask(%q) = %q, want %q", c.pan, got, c.want)
		}
	}
}

func TestHashKeyed(t *testing.T) {
	a, b := NewHasher([]byte("key-a")), NewHasher([]byte("key-b"))
	pan := "4242424242424242"
	if !bytes.Equal(a.Hash(pan), a.Hash(pan)) {
		t.Fatal("hash is not deterministic")
	}
	if bytes.Equal(a.Hash(pan), b.Hash(pan)) {
		t.Fatal("hash does not depend on the key")
	}
	if strings.Contains(string(a.Hash(pan)), pan) {
		t.Fatal("hash contains the PAN")
	}
}

func FuzzMask(f *testing.F) {
	f.Add("4242424242424242")
	f.Add("12")
	f.Fuzz(func(t *testing.T, pan string) {
		m := Mask(pan)
		if len(m) != len(pan) {
			t.Fatalf("Mask changed the length: %d -> %d", len(pan), len(m))
		}
		first, last := MaskShown(len(pan))
		if first+last > 0 && (first > 6 || last > 4 || len(pan)-first-last < 6) {
			t.Fatalf("Mask shows %d+%d of %d", first, last, len(pan))
		}
		for i := first; i < len(m)-last; i++ {
			if m[i] != '*' {
				t.Fatalf("Mask left byte %d of %d visible", i, len(m))
			}
		}
		if m[:first] != pan[:first] || m[len(m)-last:] != pan[len(pan)-last:] {
			t.Fatalf("Mask(%q) = %q: not the PAN's own first and last digits", pan, m)
		}
	})
}

func TestCheckDigit(t *testing.T) {
	for _, body := range []string{"424242424242424", "400000000000000", "0", "", "79927398710"} {
		if pan := body + string(CheckDigit(body)); !Luhn(pan) && pan != "0" {
			t.Errorf("CheckDigit(%q) = %q: %q fails Luhn", body, CheckDigit(body), pan)
		}
	}
	if CheckDigit("424242424242424") != '2' {
		t.Error("CheckDigit(424242424242424) != 2")
	}
}

// TestMaskEveryLength: for every PAN length the API accepts, at least 6
// digits are hidden, at most the first 6 and last 4 are shown, 16 digits
// and more show exactly 6 and 4, and the result matches the transactions
// table's CHECK (migration 006) for that length.
func TestMaskEveryLength(t *testing.T) {
	want := map[int][2]int{12: {4, 2}, 13: {5, 2}, 14: {6, 2}, 15: {6, 3}, 16: {6, 4}, 17: {6, 4}, 18: {6, 4}, 19: {6, 4}}
	for n := 12; n <= 19; n++ {
		pan := strings.Repeat("7", n-1)
		pan += string(CheckDigit(pan))
		m := Mask(pan)
		first, last := MaskShown(n)
		if [2]int{first, last} != want[n] {
			t.Errorf("length %d: shows first %d last %d, want %v", n, first, last, want[n])
		}
		if hidden := strings.Count(m, "*"); hidden < 6 || hidden != n-first-last {
			t.Errorf("length %d: %q hides %d digits", n, m, hidden)
		}
		if m[:first] != pan[:first] || m[n-last:] != pan[n-last:] || len(m) != n {
			t.Errorf("length %d: Mask = %q", n, m)
		}
	}
}
