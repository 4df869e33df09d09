package buildinfo_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cellpay/cellpay/internal/buildinfo"
)

func TestString(t *testing.T) {
	stamped := &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: "github.com/cellpay/cellpay", Version: "v0.0.0-20261206211106-7333f0a5614f+dirty"},
		Settings: []debug.BuildSetting{
			{Key: "-trimpath", Value: "true"},
			{Key: "vcs", Value: "git"},
			{Key: "vcs.revision", Value: "7333f0a5614f7f69c240de5623cd5236990f09ee"},
			{Key: "vcs.time", Value: "2026-12-06T21:11:06Z"},
			{Key: "vcs.modified", Value: "true"},
		}}
	clean := &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: "github.com/cellpay/cellpay", Version: "v0.1.0"},
		Settings: []debug.BuildSetting{
			{Key: "vcs.revision", Value: "7333f0a5614f7f69c240de5623cd5236990f09ee"},
			{Key: "vcs.time", Value: "2026-12-06T21:11:06Z"},
			{Key: "vcs.modified", Value: "false"},
		}}
	unstamped := &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: "github.com/cellpay/cellpay", Version: "(devel)"},
		Settings: []debug.BuildSetting{{Key: "-buildvcs", Value: "false"}}}
	for _, tc := range []struct {
		name string
		bi   *debug.BuildInfo
		want string
	}{
		{"gtr", stamped, "gtr v0.0.0-20261206211106-7333f0a5614f+dirty (rev 7333f0a, 2026-12-06T21:11:06Z, modified) go1.26.8"},
		{"cell", clean, "cell v0.1.0 (rev 7333f0a, 2026-12-06T21:11:06Z) go1.26.8"},
		{"gtrctl", unstamped, "gtrctl (devel) (rev unknown) go1.26.8"},
		{"natsmon", nil, "natsmon (devel) (rev unknown) " + runtime.Version()},
	} {
		if got := buildinfo.FromBuildInfo(tc.name, tc.bi).String(); got != tc.want {
			t.Errorf("%s:\n got %s\nwant %s", tc.name, got, tc.want)
		}
	}
	i := buildinfo.FromBuildInfo("gtr", stamped)
	if i.Revision != "7333f0a5614f7f69c240de5623cd5236990f09ee" || i.ShortRevision() != "7333f0a" || !i.Modified || i.Version != stamped.Main.Version {
		t.Errorf("fields: %+v", i)
	}
}

// TestLinkerVariables: a build go build could not stamp (no .git in the
// Docker build context) takes what -ldflags -X set; a stamp wins over them.
func TestLinkerVariables(t *testing.T) {
	defer func(v, r, tm string) { buildinfo.Version, buildinfo.Revision, buildinfo.Time = v, r, tm }(buildinfo.Version, buildinfo.Revision, buildinfo.Time)
	buildinfo.Version, buildinfo.Revision, buildinfo.Time = "v0.2.0", "abcdef0123456789", "2026-12-07T10:00:00Z"
	unstamped := &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "(devel)"}}
	if got, want := buildinfo.FromBuildInfo("cell", unstamped).String(), "cell v0.2.0 (rev abcdef0, 2026-12-07T10:00:00Z) go1.26.8"; got != want {
		t.Errorf("got %s, want %s", got, want)
	}
	stamped := &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v0.3.0"}, Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "1234567890"}}}
	if got, want := buildinfo.FromBuildInfo("cell", stamped).String(), "cell v0.3.0 (rev 1234567, 2026-12-07T10:00:00Z) go1.26.8"; got != want {
		t.Errorf("got %s, want %s", got, want)
	}
}

func TestRead(t *testing.T) {
	i := buildinfo.Read("x")
	if i.Program != "x" || i.Version == "" || i.GoVersion != runtime.Version() {
		t.Errorf("Read: %+v", i)
	}
}

func TestRequested(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want bool
	}{
		{nil, false},
		{[]string{"-version"}, true},
		{[]string{"--version"}, true},
		{[]string{"-n", "5", "-version=true"}, true},
		{[]string{"-version=false"}, false},
		{[]string{"-v", "a=loadgen -version"}, false},
		{[]string{"--", "-version"}, false},
		{[]string{"-versions"}, false},
	} {
		if got := buildinfo.Requested(tc.args); got != tc.want {
			t.Errorf("%q: %v, want %v", tc.args, got, tc.want)
		}
	}
}

func TestUsageOutput(t *testing.T) {
	var stdout, stderr strings.Builder
	for _, tc := range []struct {
		args []string
		want *strings.Builder
	}{
		{nil, &stderr},
		{[]string{"-h"}, &stdout},
		{[]string{"--help"}, &stdout},
		{[]string{"-config", "x.yaml", "-help"}, &stdout},
		{[]string{"-bogus"}, &stderr},
		{[]string{"--", "-h"}, &stderr},
		{[]string{"-hh"}, &stderr},
	} {
		if got := buildinfo.UsageOutput(tc.args, &stdout, &stderr); got != tc.want {
			t.Errorf("%q: stdout %v, want %v", tc.args, got == &stdout, tc.want == &stdout)
		}
	}
}

// binaries builds every command under cmd/ (each directory holding a main
// package, found on disk so that a new command is covered without a word
// here) once for the tests that run them, as make build does but stamped
// with the VCS revision when the module is a Git work tree. It returns the
// directory of the binaries, their names, and the short revision they
// carry ("" when unstamped).
var binaries = sync.OnceValues(func() (built, error) {
	root, err := filepath.Abs("../..")
	if err != nil {
		return built{}, err
	}
	b := built{}
	entries, err := os.ReadDir(filepath.Join(root, "cmd"))
	if err != nil {
		return b, err
	}
	pkgs := []string{}
	for _, e := range entries {
		if e.IsDir() && isMain(filepath.Join(root, "cmd", e.Name())) {
			b.names = append(b.names, e.Name())
			pkgs = append(pkgs, "./cmd/"+e.Name())
		}
	}
	if len(b.names) == 0 {
		return b, fmt.Errorf("no main package under %s", filepath.Join(root, "cmd"))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	vcs := "-buildvcs=false"
	git := exec.CommandContext(ctx, "git", "rev-parse", "HEAD")
	git.Dir = root
	if out, err := git.Output(); err == nil && len(strings.TrimSpace(string(out))) >= 7 {
		vcs, b.rev = "-buildvcs=true", strings.TrimSpace(string(out))[:7]
	}
	if b.dir, err = os.MkdirTemp("", "buildinfo-bin"); err != nil {
		return b, err
	}
	build := exec.CommandContext(ctx, "go", append([]string{"build", vcs, "-o", b.dir + string(filepath.Separator)}, pkgs...)...)
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		return b, fmt.Errorf("go build: %v\n%s", err, out)
	}
	return b, nil
})

type built struct {
	dir   string
	names []string
	rev   string
}

// isMain reports whether dir's non-test Go files are package main.
func isMain(dir string) bool {
	files, _ := filepath.Glob(filepath.Join(dir, "*.go"))
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		src, err := os.ReadFile(f)
		if err != nil {
			return false
		}
		for _, line := range strings.Split(string(src), "\n") {
			if strings.HasPrefix(line, "package ") {
				return strings.TrimSpace(line) == "package main"
			}
		}
	}
	return false
}

// TestMain removes the binaries built for the tests.
func TestMain(m *testing.M) {
	code := m.Run()
	if b, err := binaries(); err == nil && b.dir != "" {
		os.RemoveAll(b.dir)
	}
	os.Exit(code)
}

// builtBinaries is binaries, or the test skipped (-short) or failed.
func builtBinaries(t *testing.T) built {
	t.Helper()
	if testing.Short() {
		t.Skip("builds every binary")
	}
	b, err := binaries()
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"gtr", "cell", "replicator", "gtrctl", "cellpay"} {
		if !slices.Contains(b.names, name) {
			t.Fatalf("the commands found under cmd/, %v, lack %s", b.names, name)
		}
	}
	return b
}

// run runs binary name with args and no environment (no GTR_* or
// CELLPAY_* variable may matter), its stdout and stderr apart.
func run(t *testing.T, b built, name string, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(b.dir, name), args...)
	cmd.Env = []string{}
	var out, errOut strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err = cmd.Run()
	return out.String(), errOut.String(), err
}

// TestBinariesPrintVersion runs every command with -version and
// --version: exit status 0 and the build's one line, the revision in it.
// Most define -version on their flags; gtrctl has a version command
// behind it, benchrun and loadgen look for it before their own parsing.
func TestBinariesPrintVersion(t *testing.T) {
	b := builtBinaries(t)
	want := "(rev unknown)"
	if b.rev != "" {
		want = "(rev " + b.rev
	} else {
		t.Logf("no Git revision: checking the unstamped line")
	}
	for _, name := range b.names {
		for _, flag := range []string{"-version", "--version"} {
			out, errOut, err := run(t, b, name, flag)
			if err != nil {
				t.Errorf("%s %s: %v\n%s%s", name, flag, err, out, errOut)
				continue
			}
			line := strings.TrimSpace(out)
			if !strings.HasPrefix(line, name+" ") || !strings.Contains(line, want) || !strings.HasSuffix(line, " "+runtime.Version()) || strings.Count(out, "\n") != 1 {
				t.Errorf("%s %s printed %q, want one line %q... %s with %q", name, flag, out, name, runtime.Version(), want)
			}
		}
	}
}

// TestBinariesHelp runs every command with -h and --help: asking for the
// usage is not an error, so exit status 0 (the flag package's 2 is for a
// wrong flag), with the usage printed on stdout, as asked for
// (buildinfo.UsageOutput), and nothing on stderr.
func TestBinariesHelp(t *testing.T) {
	b := builtBinaries(t)
	for _, name := range b.names {
		for _, flag := range []string{"-h", "--help"} {
			out, errOut, err := run(t, b, name, flag)
			if err != nil {
				t.Errorf("%s %s: %v, want exit status 0\n%s%s", name, flag, err, out, errOut)
				continue
			}
			usage := out
			if !strings.Contains(strings.ToLower(usage), "usage") || strings.Count(usage, "\n  ") < 2 || errOut != "" {
				t.Errorf("%s %s printed stdout %q, stderr %q: want its usage, with its flags or commands", name, flag, out, errOut)
			}
		}
	}
}
