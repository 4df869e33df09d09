package main

import (
	"encoding/json"
	"runtime"
	"strings"
	"testing"
)

// TestHelpIsNotAnError: help asked for prints usage on stdout and exits
// 0; a flag that does not exist is still a usage error (stderr, 2).
func TestHelpIsNotAnError(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-h"}, "usage: gtrctl COMMAND"},
		{[]string{"--help"}, "usage: gtrctl COMMAND"},
		{[]string{"-help"}, "usage: gtrctl COMMAND"},
		{[]string{"help"}, "usage: gtrctl COMMAND"},
		{[]string{"cells", "-h"}, "usage: gtrctl cells"},
		{[]string{"drain", "cell-b", "--help"}, "usage: gtrctl drain CELL"},
		{[]string{"table", "get", "-h"}, "usage: gtrctl table get"},
		{[]string{"help", "drain"}, "usage: gtrctl drain CELL"},
		{[]string{"help", "partners", "add"}, "usage: gtrctl partners add"},
		{[]string{"statement", "-h"}, "usage: gtrctl statement PARTNER DATE"},
		{[]string{"evacuate", "-h"}, "usage: gtrctl evacuate SITE"},
		{[]string{"help", "restore-site"}, "usage: gtrctl restore-site SITE"},
		{[]string{"drills", "-h"}, "usage: gtrctl drills"},
		{[]string{"drills", "show", "-h"}, "usage: gtrctl drills show ID"},
	} {
		code, out, errs := gtrctl(t, tc.args...)
		if code != 0 || !strings.HasPrefix(out, tc.want) || errs != "" {
			t.Errorf("%q: code %d, stdout %q, stderr %q; want 0 and stdout %q...", tc.args, code, out, errs, tc.want)
		}
	}
	code, out, errs := gtrctl(t, "-h")
	if !strings.Contains(out, "version") || !strings.Contains(out, "drain CELL") {
		t.Errorf("gtrctl -h: %d\n%s%s", code, out, errs)
	}
	code, out, errs = gtrctl(t, "drain", "-h")
	if !strings.Contains(out, "-percent") || !strings.Contains(out, "-addr") {
		t.Errorf("gtrctl drain -h lists no flags: %d\n%s%s", code, out, errs)
	}

	for _, args := range [][]string{{"cells", "--nope"}, {"drain", "cell-b", "-x"}, {"help", "nope"}, {"version", "--nope"}} {
		code, out, errs := gtrctl(t, args...)
		if code != 2 || out != "" || !strings.Contains(errs, "usage: gtrctl") {
			t.Errorf("%q: code %d, stdout %q, stderr %q; want 2 and usage on stderr", args, code, out, errs)
		}
	}
	if _, _, errs := gtrctl(t, "cells", "--nope"); !strings.Contains(errs, "flag provided but not defined: -nope") {
		t.Errorf("unknown flag not named: %q", errs)
	}
}

// TestVersion: gtrctl version, -version and --version print the build's
// line and need no GTR (none listens at --addr).
func TestVersion(t *testing.T) {
	for _, args := range [][]string{{"version"}, {"-version"}, {"--version"}, {"version", "--addr", "127.0.0.1:1"}} {
		code, out, errs := gtrctl(t, args...)
		if code != 0 || !strings.HasPrefix(out, "gtrctl ") || !strings.HasSuffix(out, " "+runtime.Version()+"\n") || errs != "" {
			t.Errorf("%q: code %d, stdout %q, stderr %q", args, code, out, errs)
		}
	}
	code, out, errs := gtrctl(t, "--version", "-o", "json")
	var v struct {
		Program   string
		GoVersion string `json:"go_version"`
	}
	if err := json.Unmarshal([]byte(out), &v); code != 0 || err != nil || v.Program != "gtrctl" || v.GoVersion != runtime.Version() {
		t.Errorf("version -o json: code %d, %v: %s%s", code, err, out, errs)
	}
	if code, _, _ := gtrctl(t, "version", "extra"); code != 2 {
		t.Errorf("version extra: code %d, want 2", code)
	}
}
