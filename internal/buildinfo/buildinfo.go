// Package buildinfo tells which build a binary is: its main module's
// version, the VCS revision and commit time it was built from, whether the
// work tree had changes, and the Go version, as runtime/debug.ReadBuildInfo
// reports them. Every command's -version prints its one line:
//
//	gtr v0.0.0-20261206211106-7333f0a1b2c3+dirty (rev 7333f0a, 2026-12-06T21:11:06Z, modified) go1.26.8
//
// go build stamps the version and revision when it builds inside a Git
// work tree with git on the PATH (-buildvcs=auto, its default);
// GOFLAGS=-buildvcs=false, or a build context without .git such as the
// Dockerfile's, leaves them out, and the line says "(devel) (rev
// unknown)". Such a build may set Version, Revision and Time with
// -ldflags -X instead:
//
//	go build -ldflags "-X github.com/cellpay/cellpay/internal/buildinfo.Revision=$(git rev-parse HEAD)" ./cmd/gtr
package buildinfo

import (
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
	"strings"
)

// Set with -ldflags -X for a build go build cannot stamp; what the build
// info holds wins over them.
var (
	// Version is the main module's version, e.g. v0.1.0.
	Version string
	// Revision is the VCS revision, e.g. a Git commit hash.
	Revision string
	// Time is the revision's commit time, RFC 3339.
	Time string
)

// FlagUsage is the -version flag's usage text.
const FlagUsage = "print the version and build (module version, VCS revision and time, Go version), and exit"

// Info is one binary's build.
type Info struct {
	// Program is the binary's name: gtr, cell, gtrctl...
	Program string `json:"program"`
	// Version is the main module's version: a tag, a pseudo-version
	// (v0.0.0-<time>-<rev>[+dirty]) or "(devel)" when go build knew none.
	Version string `json:"version"`
	// Revision is the full VCS revision; "" when unknown.
	Revision string `json:"revision,omitempty"`
	// Time is the revision's commit time, RFC 3339; "" when unknown.
	Time string `json:"time,omitempty"`
	// Modified: the work tree had uncommitted changes.
	Modified bool `json:"modified"`
	// GoVersion is the Go toolchain that built the binary, e.g. go1.26.8.
	GoVersion string `json:"go_version"`
}

// Read is this binary's build, named program.
func Read(program string) Info {
	bi, _ := debug.ReadBuildInfo()
	return FromBuildInfo(program, bi)
}

// FromBuildInfo is the Info of program built as bi says (nil: nothing
// known but the running Go version and the -ldflags -X variables).
func FromBuildInfo(program string, bi *debug.BuildInfo) Info {
	i := Info{Program: program, Version: Version, Revision: Revision, Time: Time, GoVersion: runtime.Version()}
	if bi == nil {
		return i.normal()
	}
	if bi.GoVersion != "" {
		i.GoVersion = bi.GoVersion
	}
	if v := bi.Main.Version; v != "" && v != "(devel)" {
		i.Version = v
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			i.Revision = s.Value
		case "vcs.time":
			i.Time = s.Value
		case "vcs.modified":
			i.Modified = s.Value == "true"
		}
	}
	return i.normal()
}

func (i Info) normal() Info {
	if i.Version == "" {
		i.Version = "(devel)"
	}
	return i
}

// ShortRevision is the revision's first 7 characters, as git log
// --oneline shows a commit; "" when unknown.
func (i Info) ShortRevision() string {
	if len(i.Revision) > 7 {
		return i.Revision[:7]
	}
	return i.Revision
}

// String is the one line -version prints:
//
//	gtr v0.0.0-20261206211106-7333f0a1b2c3+dirty (rev 7333f0a, 2026-12-06T21:11:06Z, modified) go1.26.8
//	gtr (devel) (rev unknown) go1.26.8
func (i Info) String() string {
	var b strings.Builder
	if i.Program != "" {
		b.WriteString(i.Program)
		b.WriteByte(' ')
	}
	b.WriteString(i.normal().Version)
	parts := []string{"rev unknown"}
	if i.Revision != "" {
		parts[0] = "rev " + i.ShortRevision()
	}
	if i.Time != "" {
		parts = append(parts, i.Time)
	}
	if i.Modified {
		parts = append(parts, "modified")
	}
	fmt.Fprintf(&b, " (%s)", strings.Join(parts, ", "))
	if i.GoVersion != "" {
		b.WriteByte(' ')
		b.WriteString(i.GoVersion)
	}
	return b.String()
}

// Requested reports whether args, a command line without the program's
// name, ask for the version: -version or --version (or =true) before any
// "--". For the commands whose flags are parsed where -version cannot be
// defined beside them; the others define the flag.
func Requested(args []string) bool {
	for _, a := range args {
		switch a {
		case "--":
			return false
		case "-version", "--version", "-version=true", "--version=true":
			return true
		}
	}
	return false
}

// UsageOutput is where a command prints its usage: stdout when args, a
// command line without the program's name, ask for it (-h, -help or
// --help before any "--"), so that `gtr -h | less` shows it; stderr
// otherwise, where a wrong flag's usage follows what is wrong.
func UsageOutput(args []string, stdout, stderr io.Writer) io.Writer {
	for _, a := range args {
		switch a {
		case "--":
			return stderr
		case "-h", "--h", "-help", "--help":
			return stdout
		}
	}
	return stderr
}
