package pgtest

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/cellpay/cellpay/internal/dev/pgcluster"
	"github.com/cellpay/cellpay/internal/dev/pki"
)

// The names a Pair's standby replicates under.
const (
	ReplicationUser     = "cellpay_replicator"
	ReplicationPassword = "replicator-password-0123456789"
	StandbyName         = "cellpay_standby"
	SlotName            = "cellpay_standby"
)

// Pair is a primary with TLS and a standby streaming from it over TLS as
// the replication role, which the primary waits for on every commit.
type Pair struct {
	Primary, Standby *pgcluster.Cluster
	// CA is the file of the CA that signed the primary's certificate.
	CA string
}

// StartPair starts a Pair of its own (not the shared cluster) for t, and
// stops it when t ends. fsync is off for speed; synchronous_commit stays
// on, so a commit returns only once the standby has it.
func StartPair(t testing.TB, ctx context.Context) Pair {
	t.Helper()
	dir := t.TempDir()
	cert, key, ca, err := pki.Loopback(filepath.Join(dir, "pki"), "postgres-test")
	if err != nil {
		t.Fatal(err)
	}
	cfg := pgcluster.Config{
		DataDir:         filepath.Join(dir, "primary"),
		TLS:             &pgcluster.TLS{CertFile: cert, KeyFile: key},
		Settings:        map[string]string{"fsync": "off"},
		ReplicationUser: ReplicationUser,
	}
	primary := startCluster(t, ctx, cfg)
	if err := pgcluster.EnsureReplication(ctx, primary.URL("postgres"), pgcluster.Replication{User: ReplicationUser, Password: ReplicationPassword}, SlotName); err != nil {
		t.Fatal(err)
	}
	scfg := cfg
	scfg.DataDir = filepath.Join(dir, "standby")
	scfg.Standby = &pgcluster.Standby{
		PrimaryPort: primary.Port(), User: ReplicationUser, Password: ReplicationPassword, CAFile: ca, Slot: SlotName, Name: StandbyName,
	}
	standby := startCluster(t, ctx, scfg)
	if _, err := primary.WaitStreaming(ctx, StandbyName); err != nil {
		t.Fatal(err)
	}
	if err := primary.SetSynchronousStandby(ctx, StandbyName); err != nil {
		t.Fatal(err)
	}
	if err := primary.WaitSynchronous(ctx, StandbyName); err != nil {
		t.Fatal(err)
	}
	return Pair{Primary: primary, Standby: standby, CA: ca}
}

func startCluster(t testing.TB, ctx context.Context, cfg pgcluster.Config) *pgcluster.Cluster {
	t.Helper()
	c, err := pgcluster.Start(ctx, cfg)
	if err != nil {
		t.Fatalf("pgtest: start %s: %v", filepath.Base(cfg.DataDir), err)
	}
	t.Cleanup(func() {
		if err := c.Stop(); err != nil {
			t.Errorf("pgtest: stop %s: %v", filepath.Base(cfg.DataDir), err)
		}
	})
	return c
}
