package buildinfo_test

import (
	"context"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
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

// TestBinariesPrintVersion builds two commands as make build does, but
// stamped with the VCS revision when the module is a Git work tree, and
// runs each with -version: exit status 0 and the build's line, the
// revision in it. gtr stands for the commands that define -version on
// their flags; gtrctl has its own version command behind -version.
func TestBinariesPrintVersion(t *testing.T) {
	if testing.Short() {
		t.Skip("builds binaries")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	vcs, rev := "-buildvcs=false", ""
	git := exec.CommandContext(ctx, "git", "rev-parse", "HEAD")
	git.Dir = root
	if out, err := git.Output(); err == nil && len(strings.TrimSpace(string(out))) >= 7 {
		vcs, rev = "-buildvcs=true", strings.TrimSpace(string(out))[:7]
	} else {
		t.Logf("no Git revision (%v): checking the unstamped line", err)
	}
	bin := t.TempDir()
	build := exec.CommandContext(ctx, "go", "build", vcs, "-o", bin+string(filepath.Separator), "./cmd/gtr", "./cmd/gtrctl")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	for _, name := range []string{"gtr", "gtrctl"} {
		for _, flag := range []string{"-version", "--version"} {
			cmd := exec.CommandContext(ctx, filepath.Join(bin, name), flag)
			cmd.Env = []string{} // no GTR_* variable may matter
			out, err := cmd.Output()
			if err != nil {
				t.Fatalf("%s %s: %v\n%s", name, flag, err, out)
			}
			line := strings.TrimSpace(string(out))
			want := "(rev unknown)"
			if rev != "" {
				want = "(rev " + rev
			}
			if !strings.HasPrefix(line, name+" ") || !strings.Contains(line, want) || !strings.HasSuffix(line, " "+runtime.Version()) || strings.Count(string(out), "\n") != 1 {
				t.Errorf("%s %s printed %q, want one line %q... %s with %q", name, flag, out, name, runtime.Version(), want)
			}
		}
	}
}
