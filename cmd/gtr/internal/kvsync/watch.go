package kvsync

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// run opens the bucket, seeds it if empty and watches the entry, starting
// over whenever the watch fails, until ctx ends. NATS reconnects by itself;
// every failure here only delays convergence, never routing.
func (s *Syncer) run(ctx context.Context) {
	defer close(s.done)
	js, err := jetstream.New(s.nc)
	if err != nil {
		s.cfg.Log.Error("kvsync: jetstream", "err", err)
		return
	}
	var lastErr string
	report := func(what string, err error) {
		if msg := what + ": " + err.Error(); msg != lastErr {
			lastErr = msg
			s.cfg.Log.Warn("config store unavailable; routing on the last-known table", "op", what, "err", err)
		}
	}
	for ctx.Err() == nil {
		octx, cancel := context.WithTimeout(ctx, s.cfg.OpTimeout)
		kv, err := js.CreateOrUpdateKeyValue(octx, jetstream.KeyValueConfig{
			Bucket:      s.cfg.Bucket,
			Description: "Cellpay GTR routing configuration",
			History:     16,
		})
		cancel()
		if err == nil {
			err = s.seed(ctx, kv)
		}
		if err == nil {
			s.kv.Store(&kv)
		}
		if err != nil {
			report("open", err)
			sleep(ctx, 250*time.Millisecond)
			continue
		}
		if err := s.watch(ctx, kv); err != nil && ctx.Err() == nil {
			report("watch", err)
			sleep(ctx, 250*time.Millisecond)
		}
	}
}

// seed creates the entry when the bucket has none: from the YAML config on
// a replica that never synced, else from the configuration in force (a
// bucket lost while we ran must not roll operators' changes back).
func (s *Syncer) seed(ctx context.Context, kv jetstream.KeyValue) error {
	octx, cancel := context.WithTimeout(ctx, s.cfg.OpTimeout)
	defer cancel()
	_, err := kv.Get(octx, s.cfg.Key)
	if !errors.Is(err, jetstream.ErrKeyNotFound) {
		return err
	}
	s.mu.Lock()
	synced := s.synced
	s.mu.Unlock()
	d, _, ok := s.cfg.State.Doc()
	if !synced || !ok {
		if d, err = s.cfg.Seed(); err != nil {
			return err
		}
	}
	b, err := json.Marshal(d)
	if err != nil {
		return err
	}
	if _, err := kv.Create(octx, s.cfg.Key, b); err != nil && !errors.Is(err, jetstream.ErrKeyExists) {
		return err
	}
	s.cfg.Log.Info("seeded the config store", "bucket", s.cfg.Bucket, "key", s.cfg.Key, "version", d.Version, "from_config_file", !synced)
	return nil
}

// watch applies every update of the entry and re-reads it every
// PollInterval, until ctx ends or the watch breaks.
func (s *Syncer) watch(ctx context.Context, kv jetstream.KeyValue) error {
	w, err := kv.Watch(ctx, s.cfg.Key)
	if err != nil {
		return err
	}
	defer w.Stop()
	tick := time.NewTicker(s.cfg.PollInterval)
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
				s.applyEntry(e.Value(), e.Revision())
			}
		case <-tick.C:
			octx, cancel := context.WithTimeout(ctx, s.cfg.OpTimeout)
			e, err := kv.Get(octx, s.cfg.Key)
			cancel()
			switch {
			case err == nil:
				s.applyEntry(e.Value(), e.Revision())
			case errors.Is(err, jetstream.ErrKeyNotFound), errors.Is(err, jetstream.ErrBucketNotFound):
				return err // start over: reopen and seed
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
