package telemetry

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime/pprof"
	"strings"
	"sync"
)

// ProfileDirEnv, when set to a directory, makes every process that sets up
// telemetry write a CPU profile of its whole life there, as
// <service>-<instance>.pprof, closed at Shutdown: a diagnostic for
// benchmarks (make bench-e2e takes it as CELLPAY_CPU_PROFILE_DIR), never on
// by default. It opens no listener.
const ProfileDirEnv = "CELLPAY_CPU_PROFILE_DIR"

// startProfile starts the CPU profile ProfileDirEnv asks for, if any, and
// returns what stops it.
func startProfile(cfg Config) (stop func() error, err error) {
	dir := os.Getenv(ProfileDirEnv)
	if dir == "" {
		return func() error { return nil }, nil
	}
	name := strings.NewReplacer("/", "_", string(filepath.Separator), "_").Replace(cfg.Service + "-" + cfg.Instance)
	f, err := os.Create(filepath.Join(dir, name+".pprof"))
	if err != nil {
		return nil, fmt.Errorf("telemetry: %s: %w", ProfileDirEnv, err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("telemetry: cpu profile: %w", err)
	}
	cfg.Log.Info("writing a CPU profile", "file", f.Name())
	var once sync.Once
	return func() error {
		err := error(nil)
		once.Do(func() {
			pprof.StopCPUProfile()
			err = f.Close()
		})
		return err
	}, nil
}
