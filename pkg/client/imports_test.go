package client

import (
	"os/exec"
	"strings"
	"testing"
)

// TestPublicImportsOnly: partners import this package; it must not reach
// into the repository's internal packages, nor anything of Cellpay's but
// its public API.
func TestPublicImportsOnly(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "./...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, d := range strings.Fields(string(out)) {
		if !strings.HasPrefix(d, "github.com/cellpay/cellpay/") {
			continue
		}
		switch {
		case strings.HasPrefix(d, "github.com/cellpay/cellpay/pkg/client"), strings.HasPrefix(d, "github.com/cellpay/cellpay/pkg/api/"), d == "github.com/cellpay/cellpay/pkg/webhook":
		default:
			t.Errorf("pkg/client imports %s", d)
		}
	}
}
