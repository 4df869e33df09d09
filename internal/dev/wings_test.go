package dev_test

import (
	"bytes"
	"context"
	"os/exec"
	"sort"
	"strings"
	"testing"
	"time"
)

const module = "github.com/cellpay/cellpay/"

// shipped are the binaries built into the images that run in production,
// and the public packages partners import.
var shipped = []string{"./cmd/gtr", "./cmd/cell", "./cmd/replicator", "./cmd/gtrctl", "./cmd/natsmon", "./pkg/..."}

// goList runs go list from the module's root with args and returns its
// output's lines.
func goList(t *testing.T, args ...string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", append([]string{"list"}, args...)...)
	cmd.Dir = "../.."
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return strings.Fields(string(out))
}

// TestShippedCodeStaysOutOfDev: no shipped binary or public package
// depends, directly or through another package, on the tooling wing; and
// every package of the shipped wing (internal/ outside dev) is used by a
// shipped binary.
func TestShippedCodeStaysOutOfDev(t *testing.T) {
	deps := map[string]bool{}
	for _, p := range goList(t, append([]string{"-deps"}, shipped...)...) {
		deps[p] = true
	}
	var bad []string
	for p := range deps {
		if strings.HasPrefix(p, module+"internal/dev/") || p == module+"internal/dev" {
			bad = append(bad, p)
		}
	}
	sort.Strings(bad)
	for _, p := range bad {
		// Name who imports it, so the fix is plain.
		for _, line := range goList(t, append([]string{"-deps", "-f", "{{.ImportPath}}:{{join .Imports \",\"}}"}, shipped...)...) {
			from, imports, _ := strings.Cut(line, ":")
			for _, imp := range strings.Split(imports, ",") {
				if imp == p {
					t.Errorf("%s imports %s (the tooling wing)", strings.TrimPrefix(from, module), strings.TrimPrefix(p, module))
				}
			}
		}
	}
	if len(deps) < 50 {
		t.Fatalf("go list found %d dependencies of the shipped binaries: the list is wrong", len(deps))
	}

	for _, p := range goList(t, "./internal/...") {
		if strings.HasPrefix(p, module+"internal/dev") {
			continue
		}
		if !deps[p] {
			t.Errorf("%s is in the shipped wing but no shipped binary imports it: move it under internal/dev", strings.TrimPrefix(p, module))
		}
	}
}
