package gtr

import (
	"bytes"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/cellpay/cellpay/cmd/gtr/internal/admin"
	"github.com/cellpay/cellpay/internal/operators"
)

// operatorsRefresh is how often the operators file is read again by
// default: as often as certificates, and as a mounted Secret's update
// reaches the pod.
const operatorsRefresh = 10 * time.Second

// loadOperators reads the operators file (if any) and adds the legacy
// token (if any).
func loadOperators(file, legacy string) (*operators.Index, error) {
	var f *operators.File
	if file != "" {
		var err error
		if f, err = operators.Load(file); err != nil {
			return nil, fmt.Errorf("gtr: %w", err)
		}
	}
	ix, err := operators.Compile(f, legacy)
	if err != nil {
		return nil, fmt.Errorf("gtr: %w", err)
	}
	return ix, nil
}

// watchOperators reads file every refresh and, when its contents changed
// and still load, gives auth the new operators; a file that no longer
// loads is logged and the operators in force stay (a half-written or
// broken file must not lock every operator out). The func stops it.
func watchOperators(file, legacy string, refresh time.Duration, auth *admin.Auth, log *slog.Logger) (stop func()) {
	last, _ := os.ReadFile(file)
	done, quit := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(refresh)
		defer t.Stop()
		for {
			select {
			case <-quit:
				return
			case <-t.C:
			}
			b, err := os.ReadFile(file)
			if err != nil || bytes.Equal(b, last) {
				if err != nil {
					log.Warn("operators file unreadable: the operators in force stay", "file", file, "error", err)
				}
				continue
			}
			ix, err := loadOperators(file, legacy)
			if err != nil {
				log.Warn("operators file changed but does not load: the operators in force stay", "file", file, "error", err)
				continue
			}
			last = b
			auth.SetIndex(ix)
			log.Info("operators file reloaded", "file", file, "operators", ix.Len())
		}
	}()
	var once sync.Once
	return func() { once.Do(func() { close(quit); <-done }) }
}
