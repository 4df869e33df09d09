package refdata

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"time"

	"github.com/cellpay/cellpay/internal/iso"
)

// NATS names shared by the replicator and the cells.
const (
	// Stream holds every published version, snapshots and updates, in
	// order, on one subject: a consumer sees them in version order.
	Stream = "CELLPAY_REFDATA"
	// Subject is the stream's only subject.
	Subject = "cellpay.refdata.versions"
	// StatusSubjectPrefix + cell ID is where a cell reports, over core
	// NATS, the version it serves (a Status), every StatusInterval and
	// after every change.
	StatusSubjectPrefix = "cellpay.refdata.status."
	// StatusInterval is how often a cell reports when nothing changes.
	StatusInterval = time.Second
)

// Message kinds.
const (
	KindSnapshot = "snapshot"
	KindUpdate   = "update"
)

// MaxVersion is the highest reference data version there is. The cells
// store a version in a Postgres bigint (CHECK version > 0), so a version
// must fit an int64, and it must leave room to increase: a version at the
// store's maximum would leave nothing after it, and every later real
// version would be dropped as old. 2^53-1 is far below that and is also the
// largest integer every JSON reader (jq, JavaScript) holds exactly. A
// message, snapshot or update beyond it is refused at decode
// (ErrVersionRange), and the replicator never publishes one.
const MaxVersion uint64 = 1<<53 - 1

// ErrVersionRange means a version is 0 or above MaxVersion.
var ErrVersionRange = errors.New("refdata: version out of range")

// CheckVersion returns ErrVersionRange, wrapped with what, unless v is in
// 1..MaxVersion.
func CheckVersion(what string, v uint64) error {
	if v == 0 || v > MaxVersion {
		return fmt.Errorf("%w: %s %d is not in 1..%d", ErrVersionRange, what, v, MaxVersion)
	}
	return nil
}

// ErrInconsistent means a version does not fit the data it claims to
// follow: an update whose base is not the version served, or a message whose
// version disagrees with its content.
var ErrInconsistent = errors.New("refdata: inconsistent version")

// Update changes a few entries of the version it is based on: one rate, one
// MCC, or a handful. An update cannot remove entries; a snapshot does that.
type Update struct {
	FXRates map[string]string `json:"fx_rates,omitempty"`
	MCC     map[string]MCC    `json:"mcc,omitempty"`
}

// Message is one version on the wire (the JSON body of a message on
// Subject). A snapshot carries the whole data; an update carries the changes
// to Base, the version it must be applied to.
type Message struct {
	Version     uint64    `json:"version"`
	Kind        string    `json:"kind"`
	Base        uint64    `json:"base,omitempty"`
	Snapshot    *File     `json:"snapshot,omitempty"`
	Update      *Update   `json:"update,omitempty"`
	PublishedAt time.Time `json:"published_at"`
	// Hash is ContentHash of the snapshot or update: the replicator's
	// dedupe key, also part of the JetStream message ID.
	Hash string `json:"hash"`
}

// Status is what a cell reports about the version it serves.
type Status struct {
	Cell    string `json:"cell"`
	Version uint64 `json:"version"`
	// Source is "nats", "postgres" (loaded at start, nothing newer applied
	// yet), "bootstrap" (a file, served as version 0) or "none".
	Source      string    `json:"source"`
	AppliedAt   time.Time `json:"applied_at"`
	PublishedAt time.Time `json:"published_at"`
	// Refused counts versions this cell refused since it started;
	// LastRefused says why the last one was.
	Refused     uint64    `json:"refused"`
	LastRefused string    `json:"last_refused,omitempty"`
	ReportedAt  time.Time `json:"reported_at"`
}

// DecodeMessage parses and checks the shape of a message: a known kind with
// the matching body, a version in 1..MaxVersion (ErrVersionRange), and an
// update's base below it. Unknown fields are refused. The content itself is
// validated when applied. It is the edge of the cell for data from NATS:
// whatever bytes arrive, it returns a message or an error, never panics.
func DecodeMessage(b []byte) (*Message, error) {
	var m Message
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&m); err != nil {
		return nil, fmt.Errorf("refdata: message: %w", err)
	}
	if err := CheckVersion("message: version", m.Version); err != nil {
		return nil, err
	}
	switch {
	case m.Kind == KindSnapshot && m.Snapshot != nil && m.Update == nil:
		if m.Snapshot.Version != m.Version {
			return nil, fmt.Errorf("%w: message version %d carries snapshot version %d", ErrInconsistent, m.Version, m.Snapshot.Version)
		}
	case m.Kind == KindUpdate && m.Update != nil && m.Snapshot == nil:
		if m.Base == 0 || m.Base >= m.Version {
			return nil, fmt.Errorf("%w: update %d based on %d", ErrInconsistent, m.Version, m.Base)
		}
	default:
		return nil, fmt.Errorf("refdata: message: kind %q with the wrong body", m.Kind)
	}
	return &m, nil
}

// MsgID is the JetStream message ID of a version: a retried or concurrent
// publish of the same content as the same version is stored once.
func (m *Message) MsgID() string {
	h := m.Hash
	if len(h) > 16 {
		h = h[:16]
	}
	return fmt.Sprintf("refdata-%d-%s-%s", m.Version, m.Kind, h)
}

// ContentHash is the hex SHA-256 of v's JSON encoding (map keys sorted, so
// equal content hashes equal). Snapshots are hashed with their version
// cleared: the same data published twice hashes the same.
func ContentHash(v any) string {
	if f, ok := v.(File); ok {
		f.Version = 0
		v = f
	}
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // File and Update always encode
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// Apply returns the snapshot that results from applying u to s as version
// version, validated whole: an update that leaves anything invalid is
// refused and s is unchanged (it is immutable). version must be after s's
// and at most MaxVersion.
func (s *Snapshot) Apply(version uint64, u Update) (*Snapshot, error) {
	if err := CheckVersion("update: version", version); err != nil {
		return nil, err
	}
	if version <= s.Seq() {
		return nil, fmt.Errorf("%w: update to version %d is not after %d", ErrInconsistent, version, s.Seq())
	}
	if len(u.FXRates) == 0 && len(u.MCC) == 0 {
		return nil, fmt.Errorf("refdata: update %d changes nothing", version)
	}
	f := s.File()
	f.Version = version
	if f.FXRates == nil {
		f.FXRates = map[string]string{}
	}
	if f.MCC == nil {
		f.MCC = map[string]MCC{}
	}
	maps.Copy(f.FXRates, u.FXRates)
	maps.Copy(f.MCC, u.MCC)
	return FromFile(f)
}

// Validate checks an update on its own: known currencies, positive plain
// decimal rates (parseRate), four-digit codes with a category and a risk class. Whether it fits
// its base is checked when it is applied (Snapshot.Apply).
func (u Update) Validate() error {
	var errs []error
	if len(u.FXRates) == 0 && len(u.MCC) == 0 {
		errs = append(errs, errors.New("update: changes nothing"))
	}
	for _, cur := range sortedKeys(u.FXRates) {
		if !iso.IsCurrency(cur) {
			errs = append(errs, fmt.Errorf("fx_rates: %q is not an ISO 4217 currency", cur))
		}
		if _, ok := parseRate(u.FXRates[cur]); !ok {
			errs = append(errs, fmt.Errorf("fx_rates.%s: %q is not a positive decimal", cur, u.FXRates[cur]))
		}
	}
	for _, code := range sortedKeys(u.MCC) {
		m := u.MCC[code]
		if len(code) != 4 || !allDigits(code) {
			errs = append(errs, fmt.Errorf("mcc: %q is not four digits", code))
		}
		if m.Category == "" {
			errs = append(errs, fmt.Errorf("mcc.%s.category: is required", code))
		}
		switch m.Risk {
		case RiskLow, RiskMedium, RiskHigh:
		default:
			errs = append(errs, fmt.Errorf("mcc.%s.risk: %q is not low, medium or high", code, m.Risk))
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("refdata: %w", errors.Join(errs...))
	}
	return nil
}
