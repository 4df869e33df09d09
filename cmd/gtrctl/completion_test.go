package main

import (
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// TestCompletion sources the bash script gtrctl prints and asks it, as
// bash's completion does, for the words after what was typed: commands,
// a group's subcommands, a command's flags.
func TestCompletion(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("no bash here")
	}
	code, script, errs := gtrctl(t, "completion", "bash")
	if code != 0 {
		t.Fatalf("gtrctl completion bash: %d %s", code, errs)
	}
	for _, tt := range []struct {
		line string // the words typed, the last one being completed
		want []string
	}{
		{"gtrctl tx", []string{"txn"}},
		{"gtrctl txn ", []string{"get"}},
		{"gtrctl sta", []string{"statement"}},
		{"gtrctl statement p-001 2026-03-01 -", []string{"--addr", "-o"}},
		{"gtrctl callbacks re", []string{"replay"}},
		{"gtrctl callbacks list --st", []string{"--status"}},
		{"gtrctl cells --ad", []string{"--addr"}},
		{"gtrctl table apply -", []string{"--addr", "-f", "-o", "--dry-run"}},
		{"gtrctl eva", []string{"evacuate"}},
		{"gtrctl rest", []string{"restore", "restore-site"}},
		{"gtrctl evacuate site-a -", []string{"--over", "--no-wait", "--dry-run", "--samples"}},
		{"gtrctl restore-site site-a --d", []string{"--dry-run"}},
		{"gtrctl cells x", nil},
	} {
		words := strings.Split(tt.line, " ")
		probe := script + "\nCOMP_WORDS=(" + quoteAll(words) + "); COMP_CWORD=" + strconv.Itoa(len(words)-1) + "; _gtrctl; printf '%s\\n' \"${COMPREPLY[@]}\"\n"
		out, err := exec.Command(bash, "--norc", "-c", probe).CombinedOutput()
		if err != nil {
			t.Fatalf("%q: %v\n%s", tt.line, err, out)
		}
		got := strings.Fields(string(out))
		for _, w := range tt.want {
			if !slices.Contains(got, w) {
				t.Errorf("%q: completions %v, want %s among them", tt.line, got, w)
			}
		}
		if tt.want == nil && len(got) != 0 {
			t.Errorf("%q: completions %v, want none", tt.line, got)
		}
	}
	if code, zsh, _ := gtrctl(t, "completion", "zsh"); code != 0 || !strings.HasPrefix(zsh, "autoload -U +X bashcompinit") {
		t.Fatalf("gtrctl completion zsh: %d\n%s", code, zsh)
	}
	if code, _, _ := gtrctl(t, "completion", "fish"); code != 2 {
		t.Fatalf("gtrctl completion fish: exit %d, want 2 (usage)", code)
	}
}

func quoteAll(words []string) string {
	q := make([]string, len(words))
	for i, w := range words {
		q[i] = "'" + w + "'"
	}
	return strings.Join(q, " ")
}
