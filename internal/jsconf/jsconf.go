// Package jsconf opens the platform's JetStream streams and key-value
// buckets the one way every component does: created when missing, with
// the component's configured limits (replicas, maximum age, maximum
// size), and never rewritten when found. An operator may change a
// stream's limits with the NATS administrator's tools (three replicas to
// five, a larger size); a component that starts later keeps them, and
// says so: Open returns the differences between what it found and what it
// would have created, which the component logs and exports
// (cellpay_nats_config_differs). The components' NATS users may create
// their streams but never update, purge or delete them (package
// natsauth), so that rule is NATS's, not only this package's.
package jsconf

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Limits are the limits a component creates a stream or bucket with, and
// compares an existing one against. Zero MaxAge and MaxBytes mean none.
type Limits struct {
	Replicas int
	MaxAge   time.Duration
	MaxBytes int64
}

// Validate says what is wrong with l, naming the field.
func (l Limits) Validate() error {
	switch {
	case l.Replicas < 1 || l.Replicas > 5:
		return fmt.Errorf("replicas %d: want 1 to 5 (NATS allows no more than 5)", l.Replicas)
	case l.MaxAge < 0:
		return fmt.Errorf("max age %v: want 0 (none) or more", l.MaxAge)
	case l.MaxBytes < 0:
		return fmt.Errorf("max bytes %d: want 0 (none) or more", l.MaxBytes)
	}
	return nil
}

// Differences lists how c differs from l, as "replicas 1, want 3"; none
// when it matches.
func (l Limits) Differences(c jetstream.StreamConfig) []string {
	var d []string
	if c.Replicas != l.Replicas {
		d = append(d, fmt.Sprintf("replicas %d, want %d", c.Replicas, l.Replicas))
	}
	if c.MaxAge != l.MaxAge {
		d = append(d, fmt.Sprintf("max age %v, want %v", c.MaxAge, l.MaxAge))
	}
	// NATS says -1 for no size limit, the configuration here 0.
	if have, want := max(c.MaxBytes, 0), l.MaxBytes; have != want {
		d = append(d, fmt.Sprintf("max bytes %d, want %d", have, want))
	}
	return d
}

// OpenKeyValue opens bucket cfg.Bucket, creating it with cfg and l when it
// does not exist. It returns the bucket and how the existing bucket's
// limits differ from l (nil when it was created or matches).
func OpenKeyValue(ctx context.Context, js jetstream.JetStream, cfg jetstream.KeyValueConfig, l Limits) (jetstream.KeyValue, []string, error) {
	if err := l.Validate(); err != nil {
		return nil, nil, fmt.Errorf("bucket %s: %w", cfg.Bucket, err)
	}
	cfg.Replicas, cfg.TTL, cfg.MaxBytes = l.Replicas, l.MaxAge, l.MaxBytes
	if cfg.MaxBytes == 0 {
		cfg.MaxBytes = -1
	}
	kv, err := js.KeyValue(ctx, cfg.Bucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		kv, err = js.CreateKeyValue(ctx, cfg)
		if errors.Is(err, jetstream.ErrBucketExists) {
			// Created meanwhile by another component, or with other
			// limits: open what is there.
			kv, err = js.KeyValue(ctx, cfg.Bucket)
		}
	}
	if err != nil {
		return nil, nil, err
	}
	st, err := kv.Status(ctx)
	if err != nil {
		return nil, nil, err
	}
	bs, ok := st.(*jetstream.KeyValueBucketStatus)
	if !ok {
		return kv, nil, nil
	}
	return kv, l.Differences(bs.StreamInfo().Config), nil
}

// OpenStream opens stream cfg.Name, creating it with cfg and l when it
// does not exist. It returns the stream and how the existing stream's
// limits differ from l (nil when it was created or matches).
func OpenStream(ctx context.Context, js jetstream.JetStream, cfg jetstream.StreamConfig, l Limits) (jetstream.Stream, []string, error) {
	if err := l.Validate(); err != nil {
		return nil, nil, fmt.Errorf("stream %s: %w", cfg.Name, err)
	}
	cfg.Replicas, cfg.MaxAge, cfg.MaxBytes = l.Replicas, l.MaxAge, l.MaxBytes
	if cfg.MaxBytes == 0 {
		cfg.MaxBytes = -1
	}
	st, err := js.Stream(ctx, cfg.Name)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		st, err = js.CreateStream(ctx, cfg)
		if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			st, err = js.Stream(ctx, cfg.Name)
		}
	}
	if err != nil {
		return nil, nil, err
	}
	return st, l.Differences(st.CachedInfo().Config), nil
}

// Drift records, per stream or bucket, whether the one a component found
// differs from its own configuration: the source of the
// cellpay_nats_config_differs gauge. It holds one entry per name the
// component opens (a handful). Safe for concurrent use; the zero value is
// ready.
type Drift struct {
	mu     sync.Mutex
	differ map[string]bool
}

// Set records name's differences (none: it matches).
func (d *Drift) Set(name string, differences []string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.differ == nil {
		d.differ = map[string]bool{}
	}
	d.differ[name] = len(differences) > 0
}

// Each calls fn for every name recorded, in name order.
func (d *Drift) Each(fn func(name string, differs bool)) {
	d.mu.Lock()
	names := make([]string, 0, len(d.differ))
	for n := range d.differ {
		names = append(names, n)
	}
	m := make(map[string]bool, len(d.differ))
	for k, v := range d.differ {
		m[k] = v
	}
	d.mu.Unlock()
	sort.Strings(names)
	for _, n := range names {
		fn(n, m[n])
	}
}
