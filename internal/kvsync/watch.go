package kvsync

import (
	"context"
	"errors"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/cellpay/cellpay/internal/jsconf"
)

// noteLimits records how the bucket found differs from this replica's
// limits, and logs it the first time.
func (r *Replica[D]) noteLimits(differs []string) {
	if r.cfg.Drift != nil {
		r.cfg.Drift.Set(r.cfg.Bucket, differs)
	}
	if len(differs) > 0 && !r.warnedLimits {
		r.warnedLimits = true
		r.cfg.Log.Warn("config store's bucket limits differ from this replica's, kept as they are", "bucket", r.cfg.Bucket, "differences", differs)
	}
}

// bucketConfig is the bucket every GTR document shares, as a replica that
// finds none creates it (with ReplicaConfig.Limits); one that exists is
// kept as it is (package jsconf).
func bucketConfig(name string) jetstream.KeyValueConfig {
	return jetstream.KeyValueConfig{
		Bucket:      name,
		Description: "Cellpay GTR configuration: routing table, partner registry",
		History:     16,
	}
}

// run opens the bucket, seeds it if empty and watches the entry, starting
// over whenever the watch fails, until ctx ends. NATS reconnects by itself;
// every failure here only delays convergence, never serving.
func (r *Replica[D]) run(ctx context.Context) {
	defer close(r.done)
	js, err := jetstream.New(r.nc)
	if err != nil {
		r.cfg.Log.Error("kvsync: jetstream", "err", err)
		return
	}
	var lastErr string
	report := func(what string, err error) {
		if msg := what + ": " + err.Error(); msg != lastErr {
			lastErr = msg
			r.cfg.Log.Warn("config store unavailable; serving the last-known document", "op", what, "err", err)
		}
	}
	for ctx.Err() == nil {
		octx, cancel := context.WithTimeout(ctx, r.cfg.OpTimeout)
		var kv jetstream.KeyValue
		if r.cfg.ReadOnly {
			kv, err = js.KeyValue(octx, r.cfg.Bucket)
		} else {
			var differs []string
			kv, differs, err = jsconf.OpenKeyValue(octx, js, bucketConfig(r.cfg.Bucket), r.cfg.Limits)
			if err == nil {
				r.noteLimits(differs)
			}
		}
		cancel()
		if err == nil && !r.cfg.ReadOnly {
			err = r.seed(ctx, kv)
		}
		if err == nil {
			r.kv.Store(&kv)
		}
		if err != nil {
			report("open", err)
			sleep(ctx, 250*time.Millisecond)
			continue
		}
		if err := r.watch(ctx, kv); err != nil && ctx.Err() == nil {
			report("watch", err)
			sleep(ctx, 250*time.Millisecond)
		}
	}
}

// seed creates the entry when the bucket has none: from the YAML config on
// a replica that never synced, else from the document in force (a bucket
// lost while we ran must not roll operators' changes back). The new entry's
// revisions start again, so the next entry is taken whatever its revision.
func (r *Replica[D]) seed(ctx context.Context, kv jetstream.KeyValue) error {
	octx, cancel := context.WithTimeout(ctx, r.cfg.OpTimeout)
	defer cancel()
	_, err := kv.Get(octx, r.cfg.Key)
	if !errors.Is(err, jetstream.ErrKeyNotFound) {
		return err
	}
	r.mu.Lock()
	synced := r.synced
	d, ok := r.cfg.Target.Current()
	r.mu.Unlock()
	if !synced || !ok {
		if d, err = r.cfg.Seed(); err != nil {
			return err
		}
	}
	b, err := r.cfg.Target.Encode(d)
	if err != nil {
		return err
	}
	if _, err := kv.Create(octx, r.cfg.Key, b); err != nil && !errors.Is(err, jetstream.ErrKeyExists) {
		return err
	}
	r.mu.Lock()
	r.synced, r.refused = false, 0
	r.mu.Unlock()
	r.cfg.Log.Info("seeded the config store", "bucket", r.cfg.Bucket, "key", r.cfg.Key, r.logVersion(d), "from_config_file", !synced)
	return nil
}

// watch applies every update of the entry and re-reads it every
// PollInterval, until ctx ends or the watch breaks.
func (r *Replica[D]) watch(ctx context.Context, kv jetstream.KeyValue) error {
	w, err := kv.Watch(ctx, r.cfg.Key)
	if err != nil {
		return err
	}
	defer w.Stop()
	tick := time.NewTicker(r.cfg.PollInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case e, ok := <-w.Updates():
			if !ok {
				return errors.New("watch closed")
			}
			if e != nil && e.Operation() == jetstream.KeyValuePut {
				r.applyEntry(e.Value(), e.Revision())
			}
		case <-tick.C:
			octx, cancel := context.WithTimeout(ctx, r.cfg.OpTimeout)
			e, err := kv.Get(octx, r.cfg.Key)
			cancel()
			switch {
			case err == nil:
				r.observeLatest(e.Revision())
				r.applyEntry(e.Value(), e.Revision())
			case errors.Is(err, jetstream.ErrKeyNotFound), errors.Is(err, jetstream.ErrBucketNotFound):
				return err // start over: reopen and seed
			case errors.Is(err, nats.ErrNoResponders) && r.nc.Status() == nats.CONNECTED:
				// Connected, yet nothing serves the bucket's stream: it was
				// deleted (the watch does not end when it is).
				return err
			}
			// Other errors: NATS is away. Keep the watch; it resumes after
			// a reconnect, and the next poll catches up.
		}
	}
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
