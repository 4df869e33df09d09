package natsmon

import (
	"encoding/json"
	"errors"
	"fmt"
	"unicode/utf8"
)

// The parts of nats-server's monitoring answers (v2.15, server/monitor.go
// and server/jetstream.go) that natsmon reads. Each is a subset of the
// server's own type, with its JSON names; fields not listed are ignored,
// so a newer server's additions do not break the decoding.

// Varz is the subset of /varz: the server's name and its JetStream
// configuration, usage and meta group.
type Varz struct {
	ServerName string         `json:"server_name"`
	JetStream  *JetStreamVarz `json:"jetstream"`
}

// JetStreamVarz is /varz's jetstream object (server.JetStreamVarz).
type JetStreamVarz struct {
	Config *JetStreamConfig `json:"config"`
	Stats  *JetStreamStats  `json:"stats"`
	// Meta is the meta group (server.MetaClusterInfo): absent on a server
	// that is not in a cluster.
	Meta *MetaCluster `json:"meta"`
}

// JetStreamConfig is the server's JetStream limits (server.JetStreamConfig).
type JetStreamConfig struct {
	MaxMemory int64 `json:"max_memory"`
	MaxStore  int64 `json:"max_storage"`
}

// JetStreamStats is the server's JetStream usage (server.JetStreamStats):
// bytes used, and bytes reserved by streams' max_bytes.
type JetStreamStats struct {
	Memory         uint64 `json:"memory"`
	Store          uint64 `json:"storage"`
	ReservedMemory uint64 `json:"reserved_memory"`
	ReservedStore  uint64 `json:"reserved_storage"`
}

// MetaCluster is the JetStream meta group as one server sees it
// (server.MetaClusterInfo).
type MetaCluster struct {
	Name   string `json:"name"`
	Leader string `json:"leader"`
	Size   int    `json:"cluster_size"`
}

// Jsz is the subset of /jsz?accounts=true&streams=true&config=true: the
// streams this server holds a replica of, by account.
type Jsz struct {
	Disabled bool            `json:"disabled"`
	Accounts []AccountDetail `json:"account_details"`
}

// AccountDetail is one account's streams (server.AccountDetail).
type AccountDetail struct {
	Name    string         `json:"name"`
	Streams []StreamDetail `json:"stream_detail"`
}

// StreamDetail is one stream (server.StreamDetail). Config is present only
// when /jsz was asked with config=true.
type StreamDetail struct {
	Name    string        `json:"name"`
	Cluster *StreamGroup  `json:"cluster"`
	Config  *StreamConfig `json:"config"`
	State   StreamState   `json:"state"`
}

// StreamGroup is a stream's Raft group as this server sees it
// (server.ClusterInfo): its leader's name, "" when it has none, and the
// other replicas. Absent on a server that is not in a cluster.
type StreamGroup struct {
	Leader   string `json:"leader"`
	Replicas []Peer `json:"replicas"`
}

// Peer is one replica other than the leader (server.PeerInfo).
type Peer struct {
	Name    string `json:"name"`
	Current bool   `json:"current"`
	Offline bool   `json:"offline"`
}

// StreamConfig is the subset of a stream's configuration natsmon reports.
// MaxBytes is -1 for no limit.
type StreamConfig struct {
	MaxBytes int64  `json:"max_bytes"`
	Replicas int    `json:"num_replicas"`
	Discard  string `json:"discard"` // "old" or "new"
}

// StreamState is a stream's size (server.StreamState).
type StreamState struct {
	Msgs  uint64 `json:"messages"`
	Bytes uint64 `json:"bytes"`
}

// Healthz is /healthz's answer (server.HealthStatus): status "ok", or
// another with an error.
type Healthz struct {
	Status string `json:"status"`
	Error  string `json:"error"`
}

// FieldError is a monitoring answer that decoded but does not hold what
// natsmon needs: Field names the value, as a JSON path.
type FieldError struct {
	Field string
	Msg   string
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Msg }

// DecodeVarz decodes a /varz answer. A JSON value of the wrong type is an
// error naming its field, as is a missing or malformed server_name.
func DecodeVarz(b []byte) (*Varz, error) {
	var v Varz
	if err := unmarshal(b, &v); err != nil {
		return nil, fmt.Errorf("varz: %w", err)
	}
	if err := label("server_name", v.ServerName); err != nil {
		return nil, fmt.Errorf("varz: %w", err)
	}
	if js := v.JetStream; js != nil {
		if js.Config == nil {
			return nil, fmt.Errorf("varz: %w", &FieldError{"jetstream.config", "missing"})
		}
		if js.Stats == nil {
			return nil, fmt.Errorf("varz: %w", &FieldError{"jetstream.stats", "missing"})
		}
		if m := js.Meta; m != nil && m.Size < 0 {
			return nil, fmt.Errorf("varz: %w", &FieldError{"jetstream.meta.cluster_size", fmt.Sprintf("%d is negative", m.Size)})
		}
	}
	return &v, nil
}

// DecodeJsz decodes a /jsz answer asked with streams=true&config=true.
// A value of the wrong type, a stream or account without a valid name, or
// a stream without its config is an error naming its field.
func DecodeJsz(b []byte) (*Jsz, error) {
	var j Jsz
	if err := unmarshal(b, &j); err != nil {
		return nil, fmt.Errorf("jsz: %w", err)
	}
	for i, a := range j.Accounts {
		at := fmt.Sprintf("account_details[%d]", i)
		if err := label(at+".name", a.Name); err != nil {
			return nil, fmt.Errorf("jsz: %w", err)
		}
		for k, s := range a.Streams {
			at := fmt.Sprintf("%s.stream_detail[%d]", at, k)
			if err := label(at+".name", s.Name); err != nil {
				return nil, fmt.Errorf("jsz: %w", err)
			}
			if s.Config == nil {
				return nil, fmt.Errorf("jsz: %w", &FieldError{at + ".config", "missing (ask /jsz with config=true)"})
			}
			if s.Config.Replicas < 0 {
				return nil, fmt.Errorf("jsz: %w", &FieldError{at + ".config.num_replicas", fmt.Sprintf("%d is negative", s.Config.Replicas)})
			}
		}
	}
	return &j, nil
}

// DecodeHealthz decodes a /healthz answer; its status must be set.
func DecodeHealthz(b []byte) (*Healthz, error) {
	var h Healthz
	if err := unmarshal(b, &h); err != nil {
		return nil, fmt.Errorf("healthz: %w", err)
	}
	if h.Status == "" {
		return nil, fmt.Errorf("healthz: %w", &FieldError{"status", "missing"})
	}
	return &h, nil
}

// unmarshal is json.Unmarshal with its type errors naming the field by
// its JSON path.
func unmarshal(b []byte, v any) error {
	err := json.Unmarshal(b, v)
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) && te.Field != "" {
		return &FieldError{te.Field, fmt.Sprintf("a JSON %s, want %s", te.Value, te.Type)}
	}
	return err
}

// maxLabel bounds a name taken from a monitoring answer into a label.
const maxLabel = 256

// label checks a name that becomes a label value: set, valid UTF-8 (the
// exposition format requires it) and of bounded length.
func label(field, s string) error {
	switch {
	case s == "":
		return &FieldError{field, "missing"}
	case !utf8.ValidString(s):
		return &FieldError{field, "not valid UTF-8"}
	case len(s) > maxLabel:
		return &FieldError{field, fmt.Sprintf("%d bytes long, over %d", len(s), maxLabel)}
	}
	return nil
}
