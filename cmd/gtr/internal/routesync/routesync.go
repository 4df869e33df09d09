// Package routesync keeps the routing configuration (state.Doc) converged
// across every GTR replica: the generic kvsync.Replica under the config
// store's "routing" key, applied to the replica's state.State.
package routesync

import (
	"encoding/json"
	"errors"
	"log/slog"
	"time"

	"github.com/cellpay/cellpay/cmd/gtr/internal/state"
	"github.com/cellpay/cellpay/internal/jsconf"
	"github.com/cellpay/cellpay/internal/kvsync"
	"github.com/cellpay/cellpay/internal/tlsconf"
)

// Config configures the routing table's Syncer.
type Config struct {
	State *state.State // required
	// Seed returns the configuration to start from when there is neither a
	// state file nor a KV entry (the YAML config). Required.
	Seed func() (state.Doc, error)
	// NATSURL is the NATS server; "" runs standalone: changes stay on this
	// replica (and in its state file).
	NATSURL string
	// NATSTLS is the component's certificate as its NATS identity; zero
	// for plaintext NATS without authentication (tests, benchmarks).
	NATSTLS tlsconf.Files
	// Bucket and Key name the KV entry; defaults kvsync.DefaultBucket, "routing".
	Bucket, Key string
	// StateFile keeps the last-known configuration; "" keeps none.
	StateFile string
	// ReplicaID names this replica in NATS and the state file.
	ReplicaID string
	// PollInterval is how often the entry is re-read in case a watch update
	// was missed; default 1s.
	PollInterval time.Duration
	// OpTimeout bounds each KV operation; default 2s.
	OpTimeout time.Duration
	// Limits and Drift: see kvsync.ReplicaConfig.
	Limits jsconf.Limits
	Drift  *jsconf.Drift
	Log    *slog.Logger
}

// Syncer keeps the routing configuration (state.Doc) converged into a
// state.State.
type Syncer = kvsync.Replica[state.Doc]

// Start publishes the last-known routing configuration (the state file,
// else Seed) to cfg.State and, with a NATS URL, starts syncing in the
// background. It never waits for NATS. Close stops it.
func Start(cfg Config) (*Syncer, error) {
	if cfg.State == nil || cfg.Seed == nil {
		return nil, errors.New("kvsync: State and Seed are required")
	}
	if cfg.Key == "" {
		cfg.Key = "routing"
	}
	return kvsync.StartReplica(kvsync.ReplicaConfig[state.Doc]{
		Target: routingTarget{cfg.State}, Seed: cfg.Seed, What: "routing table",
		NATSURL: cfg.NATSURL, NATSTLS: cfg.NATSTLS, Bucket: cfg.Bucket, Key: cfg.Key, StateFile: cfg.StateFile, ReplicaID: cfg.ReplicaID,
		PollInterval: cfg.PollInterval, OpTimeout: cfg.OpTimeout, Limits: cfg.Limits, Drift: cfg.Drift, Log: cfg.Log,
	})
}

// routingTarget is the routing configuration as a Target: JSON in the
// store, applied to the state.State (which recompiles and publishes the
// routing table).
type routingTarget struct{ st *state.State }

func (routingTarget) Decode(b []byte) (state.Doc, error) {
	var d state.Doc
	err := json.Unmarshal(b, &d)
	return d, err
}

func (routingTarget) Encode(d state.Doc) ([]byte, error) { return json.Marshal(d) }
func (routingTarget) Validate(d state.Doc) error         { return d.Validate() }
func (t routingTarget) Apply(d state.Doc, rev uint64) error {
	return t.st.Apply(d, rev)
}

func (t routingTarget) Current() (state.Doc, bool) {
	d, _, ok := t.st.Doc()
	return d, ok
}

func (routingTarget) Version(d state.Doc) uint64 { return d.Version }
