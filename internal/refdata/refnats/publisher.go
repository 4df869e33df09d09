package refnats

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/cellpay/cellpay/internal/refdata"
)

// Result says what a publish did.
type Result struct {
	// Version is the version published, or the newest one when nothing
	// was (Unchanged or Duplicate).
	Version uint64
	// Unchanged: the newest version is a snapshot with the same content;
	// no version was created.
	Unchanged bool
	// Duplicate: JetStream already held this message ID (a retried or
	// concurrent publish of the same version); no version was created.
	Duplicate bool
	Seq       uint64
}

// Publisher numbers and publishes versions. Versions are one sequence for
// snapshots and updates: the newest in the stream plus one, claimed with an
// expected-last-sequence header, so that concurrent publishers cannot both
// publish the same number with different content.
type Publisher struct {
	JS  jetstream.JetStream
	Now func() time.Time // default time.Now
}

const publishAttempts = 5

// Snapshot publishes f as the next version, unless the newest version is a
// snapshot with the same content. With check, f must validate first;
// without it, it is published as it is (for testing the cells' refusal).
func (p *Publisher) Snapshot(ctx context.Context, f refdata.File, check bool) (Result, error) {
	if check {
		probe := f
		probe.Version = 1
		if _, err := refdata.FromFile(probe); err != nil {
			return Result{}, err
		}
	}
	hash := refdata.ContentHash(f)
	return p.publish(ctx, func(last *refdata.Message) (*refdata.Message, bool) {
		if last != nil && last.Kind == refdata.KindSnapshot && last.Hash == hash {
			return nil, true
		}
		v := nextVersion(last)
		f.Version = v
		return &refdata.Message{Version: v, Kind: refdata.KindSnapshot, Snapshot: &f, Hash: hash}, false
	})
}

// Update publishes u as the next version, based on the newest one.
func (p *Publisher) Update(ctx context.Context, u refdata.Update) (Result, error) {
	if err := u.Validate(); err != nil {
		return Result{}, err
	}
	hash := refdata.ContentHash(u)
	return p.publish(ctx, func(last *refdata.Message) (*refdata.Message, bool) {
		v := nextVersion(last)
		return &refdata.Message{Version: v, Kind: refdata.KindUpdate, Base: v - 1, Update: &u, Hash: hash}, false
	})
}

// publish reads the newest version, lets next build the message (or say
// unchanged), and publishes it, retrying a lost race.
func (p *Publisher) publish(ctx context.Context, next func(last *refdata.Message) (*refdata.Message, bool)) (Result, error) {
	now := p.Now
	if now == nil {
		now = time.Now
	}
	stream, err := EnsureStream(ctx, p.JS)
	if err != nil {
		return Result{}, err
	}
	for range publishAttempts {
		last, lastSeq, err := Last(ctx, stream)
		if err != nil && last == nil {
			return Result{}, err
		}
		m, unchanged := next(last)
		if unchanged {
			return Result{Version: last.Version, Unchanged: true, Seq: lastSeq}, nil
		}
		if m.Kind == refdata.KindUpdate && m.Base == 0 {
			return Result{}, errors.New("refnats: no version to update: publish a snapshot first")
		}
		m.PublishedAt = now().UTC()
		seq, dup, err := Publish(ctx, p.JS, m, lastSeq, nil)
		if ErrWrongLastSequence(err) {
			continue
		}
		if err != nil {
			return Result{}, err
		}
		return Result{Version: m.Version, Duplicate: dup, Seq: seq}, nil
	}
	return Result{}, fmt.Errorf("refnats: publish: lost the race %d times", publishAttempts)
}

func nextVersion(last *refdata.Message) uint64 {
	if last == nil {
		return 1
	}
	return last.Version + 1
}

// LastVersion returns the newest version in the stream (0 when empty).
func LastVersion(ctx context.Context, js jetstream.JetStream) (uint64, error) {
	stream, err := EnsureStream(ctx, js)
	if err != nil {
		return 0, err
	}
	last, _, err := Last(ctx, stream)
	if last == nil {
		return 0, err
	}
	return last.Version, nil
}

// CollectStatus listens to every cell's status for d and returns the
// newest report of each cell.
func CollectStatus(ctx context.Context, nc *nats.Conn, d time.Duration) (map[string]refdata.Status, error) {
	ch := make(chan *nats.Msg, 1024)
	sub, err := nc.ChanSubscribe(refdata.StatusSubjectPrefix+"*", ch)
	if err != nil {
		return nil, fmt.Errorf("refnats: status: %w", err)
	}
	defer sub.Unsubscribe()
	out := map[string]refdata.Status{}
	timer := time.NewTimer(d)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return out, ctx.Err()
		case <-timer.C:
			return out, nil
		case msg := <-ch:
			var st refdata.Status
			if json.Unmarshal(msg.Data, &st) == nil && st.Cell != "" {
				if prev, ok := out[st.Cell]; !ok || !st.ReportedAt.Before(prev.ReportedAt) {
					out[st.Cell] = st
				}
			}
		}
	}
}
