// Package golden replays transcript files against a state machine and
// compares what it does now with what the files say, for the machines'
// transcript tests (internal/pnr/cellside, internal/pnr/gtrside).
package golden

import (
	"os"
	"path/filepath"
	"testing"
)

// Transcripts runs run on every file matching glob and compares its output
// with the file. With rewrite, it writes the output back instead: review
// the diff before committing it. flagName names the flag that sets
// rewrite, for the failure message.
func Transcripts(t *testing.T, glob string, rewrite bool, flagName string, run func(t *testing.T, script string) string) {
	t.Helper()
	files, err := filepath.Glob(glob)
	if err != nil || len(files) == 0 {
		t.Fatalf("no transcripts match %s: %v", glob, err)
	}
	for _, file := range files {
		t.Run(filepath.Base(file), func(t *testing.T) {
			want, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			got := run(t, string(want))
			if rewrite {
				if err := os.WriteFile(file, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			if got != string(want) {
				t.Errorf("transcript differs (run with -%s to accept):\n--- want\n%s\n--- got\n%s", flagName, want, got)
			}
		})
	}
}
