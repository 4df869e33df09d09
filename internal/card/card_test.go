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
		{"378282246310005", "378282*****0005"},
		{"123456789012", "123456**9012"},
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
		keep := 0
		if len(pan) > 10 {
			keep = 6
		}
		for i := keep; i < len(m)-min(keep, 4); i++ {
			if m[i] != '*' {
				t.Fatalf("Mask left byte %d of %d visible", i, len(m))
			}
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
