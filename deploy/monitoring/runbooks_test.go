package monitoring_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode"

	"gopkg.in/yaml.v3"
)

// runbookBase is where every alert's runbook_url points: docs/runbooks.md
// as operators can open it from a page (a path in the repository is not a
// link). cellpay.rules.yaml's header says how a fork changes it.
const runbookBase = "https://github.com/cellpay/cellpay/blob/main/docs/runbooks.md"

// anchors returns the anchors of a Markdown document's headings as GitHub
// makes them: lower case, punctuation dropped, spaces as hyphens, a
// repeated one numbered -1, -2...; headings inside code fences are not.
func anchors(md string) map[string]bool {
	got := map[string]bool{}
	seen := map[string]int{}
	fence := false
	for _, line := range strings.Split(md, "\n") {
		if strings.HasPrefix(line, "```") {
			fence = !fence
			continue
		}
		text, ok := strings.CutPrefix(strings.TrimLeft(line, "#"), " ")
		if fence || !strings.HasPrefix(line, "#") || !ok {
			continue
		}
		var b strings.Builder
		for _, r := range strings.ToLower(strings.TrimSpace(text)) {
			switch {
			case r == ' ':
				b.WriteRune('-')
			case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
				b.WriteRune(r)
			}
		}
		a := b.String()
		if n := seen[a]; n > 0 {
			got[a+"-"+strconv.Itoa(n)] = true
		} else {
			got[a] = true
		}
		seen[a]++
	}
	return got
}

func TestAnchors(t *testing.T) {
	got := anchors("# Runbooks: what to check\n## CellpayCellEjected\n```\n# not a heading\n```\n## A cell's Postgres\n## A cell's Postgres\n#nospace\n")
	for _, want := range []string{"runbooks-what-to-check", "cellpaycellejected", "a-cells-postgres", "a-cells-postgres-1"} {
		if !got[want] {
			t.Errorf("no anchor %q in %v", want, got)
		}
	}
	if len(got) != 4 {
		t.Errorf("anchors %v, want 4", got)
	}
}

// TestEveryAlertHasARunbook: every alert's runbook_url is its own section
// of docs/runbooks.md (the alert's name in lower case), that section
// exists, the description ends with the same link, and the runbooks hold
// no section of an alert that is gone. Links inside the runbooks to their
// own sections resolve.
func TestEveryAlertHasARunbook(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("rules", "cellpay.rules.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var f ruleFile
	if err := yaml.Unmarshal(b, &f); err != nil {
		t.Fatal(err)
	}
	md, err := os.ReadFile(filepath.Join("..", "..", "docs", "runbooks.md"))
	if err != nil {
		t.Fatal(err)
	}
	sections := anchors(string(md))
	alerts := map[string]bool{}
	for _, g := range f.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				continue
			}
			anchor := strings.ToLower(r.Alert)
			alerts[anchor] = true
			url := r.Annotations["runbook_url"]
			if want := runbookBase + "#" + anchor; url != want {
				t.Errorf("%s: runbook_url %q, want %q", r.Alert, url, want)
			}
			if !sections[anchor] {
				t.Errorf("%s: docs/runbooks.md has no section \"## %s\" (anchor #%s)", r.Alert, r.Alert, anchor)
			}
			if d := strings.TrimSpace(r.Annotations["description"]); url == "" || !strings.HasSuffix(d, "Runbook: "+url) {
				t.Errorf("%s: description does not end with \"Runbook: %s\": %q", r.Alert, url, d)
			}
		}
	}
	if len(alerts) < 10 {
		t.Fatalf("%d alerts: the rules file was not read", len(alerts))
	}
	for a := range sections {
		if strings.HasPrefix(a, "cellpay") && !alerts[a] {
			t.Errorf("docs/runbooks.md has a section #%s, and no alert has that name", a)
		}
	}
	for _, m := range regexp.MustCompile(`\]\(#([^)\s]+)\)`).FindAllStringSubmatch(string(md), -1) {
		if !sections[m[1]] {
			t.Errorf("docs/runbooks.md links to #%s, which is none of its sections", m[1])
		}
	}
}
