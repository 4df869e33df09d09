// Package refnats is the JetStream side of reference data, shared by the
// replicator (which publishes versions) and the cells (which consume them):
// the stream's configuration and the publish and read helpers. It never
// decides what a version contains; package refdata does.
package refnats

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/cellpay/cellpay/internal/jsconf"
	"github.com/cellpay/cellpay/internal/refdata"
)

// DuplicateWindow is how long JetStream remembers message IDs: a retried
// publish of the same version within it is stored once.
const DuplicateWindow = 10 * time.Minute

// StreamConfig is the one configuration of the reference data stream. File
// storage, so that versions survive a NATS restart; every version is kept
// up to a generous bound, so that a new cell can replay from the start.
func StreamConfig() jetstream.StreamConfig {
	return jetstream.StreamConfig{
		Name:        refdata.Stream,
		Description: "Cellpay reference data versions (snapshots and updates), one subject, in version order",
		Subjects:    []string{refdata.Subject},
		Storage:     jetstream.FileStorage,
		Retention:   jetstream.LimitsPolicy,
		MaxMsgs:     1_000_000,
		MaxMsgSize:  8 << 20,
		Discard:     jetstream.DiscardOld,
		Duplicates:  DuplicateWindow,
	}
}

// DefaultMaxBytes bounds the stream's size on each server; past it the
// oldest versions go first (as past MaxMsgs).
const DefaultMaxBytes = 1 << 30

// EnsureStream returns the stream, creating it when it does not exist
// with StreamConfig, replicas replicas (zero is 1) and DefaultMaxBytes.
// An existing stream is kept as it is: the differences of its limits from
// those are returned (package jsconf).
func EnsureStream(ctx context.Context, js jetstream.JetStream, replicas int) (jetstream.Stream, []string, error) {
	s, differs, err := jsconf.OpenStream(ctx, js, StreamConfig(), jsconf.Limits{Replicas: max(replicas, 1), MaxBytes: DefaultMaxBytes})
	if err != nil {
		return nil, nil, fmt.Errorf("refnats: stream: %w", err)
	}
	return s, differs, nil
}

// Last returns the newest version in the stream and its stream sequence,
// or nil and 0 when the stream is empty. A message that does not decode is
// returned as an error wrapping refdata's, with its sequence.
func Last(ctx context.Context, s jetstream.Stream) (*refdata.Message, uint64, error) {
	raw, err := s.GetLastMsgForSubject(ctx, refdata.Subject)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, fmt.Errorf("refnats: last: %w", err)
	}
	var m refdata.Message
	if err := json.Unmarshal(raw.Data, &m); err != nil {
		// Still tell the caller the version, so that numbering goes on.
		var v struct {
			Version uint64 `json:"version"`
		}
		_ = json.Unmarshal(raw.Data, &v)
		return &refdata.Message{Version: v.Version}, raw.Sequence, fmt.Errorf("refnats: last (seq %d): %w", raw.Sequence, err)
	}
	return &m, raw.Sequence, nil
}

// Publish publishes m with its message ID, expecting lastSeq to be the
// stream's last sequence (optimistic concurrency: two replicators cannot
// both publish version N). body, if not nil, is sent instead of m's JSON
// (to publish a deliberately broken message). duplicate is true when
// JetStream had already stored this message ID.
func Publish(ctx context.Context, js jetstream.JetStream, m *refdata.Message, lastSeq uint64, body []byte) (seq uint64, duplicate bool, err error) {
	if body == nil {
		if body, err = json.Marshal(m); err != nil {
			return 0, false, fmt.Errorf("refnats: publish: %w", err)
		}
	}
	msg := nats.NewMsg(refdata.Subject)
	msg.Data = body
	ack, err := js.PublishMsg(ctx, msg, jetstream.WithMsgID(m.MsgID()), jetstream.WithExpectLastSequence(lastSeq))
	if err != nil {
		return 0, false, fmt.Errorf("refnats: publish version %d: %w", m.Version, err)
	}
	return ack.Sequence, ack.Duplicate, nil
}

// ErrWrongLastSequence reports a lost publish race: another publisher got
// there first. Re-read the last version and try again.
func ErrWrongLastSequence(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence
}
