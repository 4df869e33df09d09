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
// snapshots and updates: the newest good version in the stream plus one
// (see Newest), claimed with an expected-last-sequence header, so that
// concurrent publishers cannot both publish the same number with different
// content. It never publishes a version beyond refdata.MaxVersion.
type Publisher struct {
	JS  jetstream.JetStream
	Now func() time.Time // default time.Now
	// Replicas is the stream's replica count if this publisher creates
	// it (nobody has yet); zero is 1.
	Replicas int
	// OnDiffers, if set, hears how an existing stream's limits differ from
	// those this publisher would have created it with (kept as they are).
	OnDiffers func(differences []string)
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
	stream, differs, err := EnsureStream(ctx, p.JS, p.Replicas)
	if err != nil {
		return Result{}, err
	}
	if len(differs) > 0 && p.OnDiffers != nil {
		p.OnDiffers(differs)
	}
	for range publishAttempts {
		last, lastSeq, err := Newest(ctx, stream)
		if err != nil {
			return Result{}, err
		}
		m, unchanged := next(last)
		if unchanged {
			return Result{Version: last.Version, Unchanged: true, Seq: lastSeq}, nil
		}
		if m.Kind == refdata.KindUpdate && m.Base == 0 {
			return Result{}, errors.New("refnats: no version to update: publish a snapshot first")
		}
		if err := refdata.CheckVersion("refnats: publish: version", m.Version); err != nil {
			return Result{}, err
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

// LastVersion returns the newest good version in the stream (0 when
// there is none), as Newest finds it.
func LastVersion(ctx context.Context, js jetstream.JetStream) (uint64, error) {
	stream, err := js.Stream(ctx, refdata.Stream)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("refnats: stream: %w", err)
	}
	last, _, err := Newest(ctx, stream)
	if last == nil {
		return 0, err
	}
	return last.Version, nil
}

// maxScan bounds how far back Newest looks for a good version.
const maxScan = 1000

// Newest returns the newest message of the stream that refdata.DecodeMessage
// accepts (nil when there is none) and the stream's last sequence, which a
// publish must expect. Messages that do not decode (garbage, or a version
// outside 1..refdata.MaxVersion that something other than a Publisher put
// there) are passed over: every cell refuses them, so numbering goes on from
// the version the cells serve, and a poisoned 2^63-1 does not push every
// later version out of range. It looks at most maxScan messages back.
func Newest(ctx context.Context, s jetstream.Stream) (*refdata.Message, uint64, error) {
	raw, err := s.GetLastMsgForSubject(ctx, refdata.Subject)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, fmt.Errorf("refnats: newest: %w", err)
	}
	lastSeq := raw.Sequence
	for seq, scanned := lastSeq, 0; ; scanned++ {
		if raw != nil {
			if m, err := refdata.DecodeMessage(raw.Data); err == nil {
				return m, lastSeq, nil
			}
		}
		if seq <= 1 {
			return nil, lastSeq, nil // nothing good at all: start at 1
		}
		if scanned == maxScan {
			return nil, lastSeq, fmt.Errorf("refnats: newest: no good version in the last %d messages (up to sequence %d)", maxScan, lastSeq)
		}
		seq--
		raw, err = s.GetMsg(ctx, seq)
		switch {
		case errors.Is(err, jetstream.ErrMsgNotFound):
			raw = nil // deleted, or below the first sequence kept
		case err != nil:
			return nil, lastSeq, fmt.Errorf("refnats: newest (seq %d): %w", seq, err)
		}
	}
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
