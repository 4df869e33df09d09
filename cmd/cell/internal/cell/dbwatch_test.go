package cell

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cellpay/cellpay/internal/dev/testutil"
)

// slowDB fails every health check; its writes commit while writing is set.
type slowDB struct {
	writing   atomic.Bool
	committed atomic.Int64
}

func (d *slowDB) Ping(ctx context.Context) error {
	if d.writing.Load() {
		d.committed.Store(time.Now().UnixNano())
	}
	return errors.New("timeout: the database is busy")
}

func (d *slowDB) Committed() time.Time { return time.Unix(0, d.committed.Load()) }

// TestBusyDatabaseKeepsTheCellServing: checks of the database that fail
// while transactions' writes commit do not take the cell out (a busy
// database is not a dead one); once the writes stop too, they do.
func TestBusyDatabaseKeepsTheCellServing(t *testing.T) {
	db := &slowDB{}
	db.writing.Store(true)
	var down atomic.Bool
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		watchDatabase(ctx, db, func(ok bool) { down.Store(!ok) }, slog.New(slog.DiscardHandler))
		close(done)
	}()
	defer func() { cancel(); <-done }()
	// Three failed checks in a row take a cell out; six pass here.
	time.Sleep(6 * 500 * time.Millisecond)
	if down.Load() {
		t.Fatal("the cell was taken out while its writes were committing")
	}
	db.writing.Store(false)
	testutil.Eventually(t, 5*time.Second, "the cell out once the writes stopped too", down.Load)
}
