package main

import (
	"os/exec"
	"strings"
	"testing"
)

// TestNoDatabaseDriver holds docs/design/README.md's "the GTR imports no database
// driver": it keeps no state of its own beyond memory, NATS KV and a file.
func TestNoDatabaseDriver(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	deps := strings.Fields(string(out))
	if len(deps) < 50 {
		t.Fatalf("go list gave %d packages: not a real dependency list", len(deps))
	}
	for _, d := range deps {
		// database/sql itself comes in through libraries' interfaces
		// (a metrics collector, a UUID's driver.Valuer); drivers must not.
		for _, banned := range []string{"github.com/jackc/", "github.com/lib/pq", "github.com/go-sql-driver/", "github.com/mattn/go-sqlite3", "modernc.org/sqlite"} {
			if strings.HasPrefix(d, banned) {
				t.Errorf("the GTR imports %s", d)
			}
		}
	}
}
