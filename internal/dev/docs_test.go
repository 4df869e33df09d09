package dev_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestReadmeMapsEveryPackage: the README's package map names every package
// of the module, so that a new package is placed (and its wing chosen) in
// the same change that adds it.
func TestReadmeMapsEveryPackage(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	pkgs := goList(t, "./...")
	if len(pkgs) < 50 {
		t.Fatalf("go list found %d packages: the list is wrong", len(pkgs))
	}
	for _, p := range pkgs {
		rel := strings.TrimPrefix(p, module)
		if !strings.Contains(string(readme), "`"+rel+"`") {
			t.Errorf("README.md's package map does not name %s", rel)
		}
	}
}

// TestDocsLinksStayInside: the README and docs/ link only to files of the
// repository (or to the web), and every relative link resolves: the
// project's documentation is all in the repository.
func TestDocsLinksStayInside(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	files := []string{filepath.Join(root, "README.md")}
	err = filepath.WalkDir(filepath.Join(root, "docs"), func(path string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(path, ".md") {
			files = append(files, path)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	link := regexp.MustCompile(`\]\(([^)\s]+)\)`)
	for _, f := range files {
		text, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(root, f)
		for _, m := range link.FindAllStringSubmatch(string(text), -1) {
			target, _, _ := strings.Cut(m[1], "#")
			if target == "" || strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			abs := filepath.Clean(filepath.Join(filepath.Dir(f), target))
			if !strings.HasPrefix(abs, root+string(filepath.Separator)) && abs != root {
				t.Errorf("%s links outside the repository: %s", rel, m[1])
				continue
			}
			if _, err := os.Stat(abs); err != nil {
				t.Errorf("%s links to %s, which does not exist", rel, m[1])
			}
		}
	}
}
