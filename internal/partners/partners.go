// Package partners is the partner registry: who may send transactions, with
// which API keys, in which markets and payment types, at what rate, and where
// their callbacks go.
//
// The registry is configuration, like the routing table: one versioned
// document (Registry) that every GTR replica holds, compiled into an
// immutable Index that answers Authenticate on the hot path without locks.
//
// API keys are never stored: a Key holds the SHA-256 of the key's secret,
// which is 256 bits from crypto/rand, so a fast hash is as good as a slow
// one against guessing. A plaintext key exists once, when NewKey makes it.
// Nothing in this package logs, and no error it returns quotes a key.
package partners

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base32"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/cellpay/cellpay/pkg/routing"
)

// Errors that callers branch on.
var (
	// ErrUnauthenticated: the key is malformed, unknown, revoked or wrong.
	// Callers answer UNAUTHENTICATED and never say which.
	ErrUnauthenticated = errors.New("partners: unauthenticated")
	// ErrSuspended: the key is good but its partner is suspended.
	ErrSuspended = errors.New("partners: partner suspended")
	// ErrInvalid wraps every validation error of a Registry.
	ErrInvalid = errors.New("partners: invalid registry")
)

// Status of a partner.
const (
	StatusActive    = "active"
	StatusSuspended = "suspended"
)

// Callback endpoint modes (the WeChat Pay guide's private callback modes).
const (
	ModeRandom  = "random"  // any endpoint; a retry moves to another
	ModeOrdered = "ordered" // the first, then the next on failure
	ModeReverse = "reverse" // the last first
)

// Caps: a registry is configuration from operators and from the network
// (NATS KV, the Admin API); these keep one bad document from costing every
// replica memory and CPU.
const (
	MaxPartners          = 10_000
	MaxKeysPerPartner    = 8
	MaxEndpoints         = 8
	MaxCallbackSecrets   = 4
	maxListLen           = 64
	maxEndpointLen       = 512
	keyPrefix            = "cpk_"
	keyIDLen             = 16 // base32 characters (80 bits)
	keySecretLen         = 64 // hex characters (256 bits)
	maxKeyLen            = len(keyPrefix) + keyIDLen + 1 + keySecretLen
	defaultRatePerSecond = 1000
)

// Registry is the whole partner configuration. Every change raises Version.
type Registry struct {
	Version  uint64    `json:"version" yaml:"version"`
	Partners []Partner `json:"partners" yaml:"partners"`
}

// Partner is one partner. Empty Markets or PaymentTypes allow all.
type Partner struct {
	ID                 string    `json:"id" yaml:"id"`
	Status             string    `json:"status" yaml:"status"`
	Keys               []Key     `json:"keys,omitempty" yaml:"keys,omitempty"`
	SettlementCurrency string    `json:"settlement_currency,omitempty" yaml:"settlement_currency,omitempty"`
	Markets            []string  `json:"markets,omitempty" yaml:"markets,omitempty"`
	PaymentTypes       []string  `json:"payment_types,omitempty" yaml:"payment_types,omitempty"`
	Limits             Limits    `json:"limits" yaml:"limits"`
	Callbacks          Callbacks `json:"callbacks" yaml:"callbacks"`
	// HomeSite, optional, names the partner's home site, in the form of a
	// cell's site (routing.CheckSite: such as site-a). Nothing routes by
	// it yet: it is shown to operators.
	HomeSite string `json:"home_site,omitempty" yaml:"home_site,omitempty"`
}

// Key is one API key, by its ID and the hash of its secret.
type Key struct {
	ID      string    `json:"id" yaml:"id"`
	Hash    string    `json:"hash" yaml:"hash"` // hex SHA-256 of the secret
	Created time.Time `json:"created" yaml:"created"`
}

// Limits bound what a partner may have the GTR do. Zero means the default.
type Limits struct {
	RatePerSecond float64 `json:"rate_per_second,omitempty" yaml:"rate_per_second,omitempty"`
	Burst         int     `json:"burst,omitempty" yaml:"burst,omitempty"`
	MaxInFlight   int     `json:"max_in_flight,omitempty" yaml:"max_in_flight,omitempty"`
}

// Callbacks says where and how the partner is told of final outcomes.
// Secrets are the signing secrets (Standard Webhooks `whsec_...`), newest
// first; several allow rotation.
type Callbacks struct {
	Mode      string   `json:"mode,omitempty" yaml:"mode,omitempty"`
	Endpoints []string `json:"endpoints,omitempty" yaml:"endpoints,omitempty"`
	Public    string   `json:"public,omitempty" yaml:"public,omitempty"`
	Secrets   []string `json:"secrets,omitempty" yaml:"secrets,omitempty"`
}

var (
	partnerIDRe = regexp.MustCompile(`^[A-Za-z0-9._-]{1,64}$`)
	keyIDRe     = regexp.MustCompile(`^[a-z2-7]{16}$`)
	hashRe      = regexp.MustCompile(`^[0-9a-f]{64}$`)
	upper3Re    = regexp.MustCompile(`^[A-Z]{3}$`)
	upper2Re    = regexp.MustCompile(`^[A-Z]{2}$`)
)

var paymentTypes = []string{"CARD_AUTHORIZATION", "CARD_REFUND", "BANK_TRANSFER"}

// Validate checks the whole registry and names the first bad field.
func (r *Registry) Validate() error {
	if len(r.Partners) > MaxPartners {
		return fmt.Errorf("%w: partners: %d entries, at most %d", ErrInvalid, len(r.Partners), MaxPartners)
	}
	seen := make(map[string]bool, len(r.Partners))
	keys := map[string]bool{}
	for i := range r.Partners {
		p := &r.Partners[i]
		if err := p.validate(); err != nil {
			return fmt.Errorf("%w: partners[%d]: %w", ErrInvalid, i, err)
		}
		if seen[p.ID] {
			return fmt.Errorf("%w: partners[%d].id: %q listed twice", ErrInvalid, i, p.ID)
		}
		seen[p.ID] = true
		for j, k := range p.Keys {
			if keys[k.ID] {
				return fmt.Errorf("%w: partners[%d].keys[%d].id: %q is used twice", ErrInvalid, i, j, k.ID)
			}
			keys[k.ID] = true
		}
	}
	return nil
}

// FieldError is a Partner's field that fails validation, named by its
// path in the registry document (e.g. "markets[0]", "callbacks.mode").
type FieldError struct {
	Field, Reason string
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Reason }

func fieldErr(field, format string, args ...any) error {
	return &FieldError{Field: field, Reason: fmt.Sprintf(format, args...)}
}

// Validate checks one partner on its own (what Registry.Validate checks of
// each); its errors are *FieldError.
func (p *Partner) Validate() error { return p.validate() }

func (p *Partner) validate() error {
	if !partnerIDRe.MatchString(p.ID) {
		return fieldErr("id", "want 1 to 64 characters of [A-Za-z0-9._-]")
	}
	if p.Status != StatusActive && p.Status != StatusSuspended {
		return fieldErr("status", "%q, want %s or %s", p.Status, StatusActive, StatusSuspended)
	}
	if len(p.Keys) > MaxKeysPerPartner {
		return fieldErr("keys", "%d, at most %d", len(p.Keys), MaxKeysPerPartner)
	}
	for j, k := range p.Keys {
		if !keyIDRe.MatchString(k.ID) {
			return fieldErr(fmt.Sprintf("keys[%d].id", j), "want %d characters of [a-z2-7]", keyIDLen)
		}
		if !hashRe.MatchString(k.Hash) {
			return fieldErr(fmt.Sprintf("keys[%d].hash", j), "want 64 lowercase hex characters (SHA-256)")
		}
	}
	if c := p.SettlementCurrency; c != "" && !upper3Re.MatchString(c) {
		return fieldErr("settlement_currency", "want an ISO 4217 code such as EUR")
	}
	if len(p.Markets) > maxListLen {
		return fieldErr("markets", "%d entries, at most %d", len(p.Markets), maxListLen)
	}
	for j, m := range p.Markets {
		if !upper2Re.MatchString(m) {
			return fieldErr(fmt.Sprintf("markets[%d]", j), "%q, want an ISO 3166-1 alpha-2 code", m)
		}
	}
	if len(p.PaymentTypes) > len(paymentTypes) {
		return fieldErr("payment_types", "%d entries, at most %d", len(p.PaymentTypes), len(paymentTypes))
	}
	for j, t := range p.PaymentTypes {
		if !slices.Contains(paymentTypes, t) {
			return fieldErr(fmt.Sprintf("payment_types[%d]", j), "%q, want one of %s", t, strings.Join(paymentTypes, ", "))
		}
	}
	if err := routing.CheckSite(p.HomeSite); err != nil {
		return fieldErr("home_site", "%v", err)
	}
	l := p.Limits
	if l.RatePerSecond < 0 || l.RatePerSecond > 1e6 || l.Burst < 0 || l.Burst > 1e6 || l.MaxInFlight < 0 || l.MaxInFlight > 1e6 {
		return fieldErr("limits", "rate_per_second, burst and max_in_flight must be between 0 (default) and 1000000")
	}
	return p.Callbacks.validate()
}

func (c *Callbacks) validate() error {
	switch c.Mode {
	case "", ModeRandom, ModeOrdered, ModeReverse:
	default:
		return fieldErr("callbacks.mode", "%q, want %s, %s or %s", c.Mode, ModeRandom, ModeOrdered, ModeReverse)
	}
	if len(c.Endpoints) > MaxEndpoints {
		return fieldErr("callbacks.endpoints", "%d, at most %d", len(c.Endpoints), MaxEndpoints)
	}
	for j, e := range c.Endpoints {
		if err := validEndpoint(e); err != nil {
			return fieldErr(fmt.Sprintf("callbacks.endpoints[%d]", j), "%v", err)
		}
	}
	if c.Public != "" {
		if err := validEndpoint(c.Public); err != nil {
			return fieldErr("callbacks.public", "%v", err)
		}
	}
	if len(c.Secrets) > MaxCallbackSecrets {
		return fieldErr("callbacks.secrets", "%d, at most %d", len(c.Secrets), MaxCallbackSecrets)
	}
	for j := range c.Secrets {
		s := c.Secrets[j]
		if !strings.HasPrefix(s, "whsec_") || len(s) < len("whsec_")+24 || len(s) > 256 {
			return fieldErr(fmt.Sprintf("callbacks.secrets[%d]", j), "want whsec_ followed by base64 of at least 18 bytes")
		}
	}
	return nil
}

func validEndpoint(e string) error {
	if len(e) > maxEndpointLen {
		return fmt.Errorf("longer than %d characters", maxEndpointLen)
	}
	if !strings.HasPrefix(e, "https://") && !strings.HasPrefix(e, "http://") {
		return errors.New("want an http:// or https:// URL")
	}
	return nil
}

// Find returns the partner with the given ID.
func (r *Registry) Find(id string) (*Partner, bool) {
	for i := range r.Partners {
		if r.Partners[i].ID == id {
			return &r.Partners[i], true
		}
	}
	return nil, false
}

// Clone returns a deep copy, for changing a registry without touching one
// that is being served.
func (r *Registry) Clone() *Registry {
	c := &Registry{Version: r.Version, Partners: make([]Partner, len(r.Partners))}
	for i, p := range r.Partners {
		p.Keys = slices.Clone(p.Keys)
		p.Markets = slices.Clone(p.Markets)
		p.PaymentTypes = slices.Clone(p.PaymentTypes)
		p.Callbacks.Endpoints = slices.Clone(p.Callbacks.Endpoints)
		p.Callbacks.Secrets = slices.Clone(p.Callbacks.Secrets)
		c.Partners[i] = p
	}
	return c
}

// Redacted returns a copy without callback secrets, for showing a registry
// to operators. Key hashes stay: they reveal nothing usable.
func (r *Registry) Redacted() *Registry {
	c := r.Clone()
	for i := range c.Partners {
		if n := len(c.Partners[i].Callbacks.Secrets); n > 0 {
			c.Partners[i].Callbacks.Secrets = make([]string, n)
			for j := range n {
				c.Partners[i].Callbacks.Secrets[j] = "whsec_…redacted"
			}
		}
	}
	return c
}

var keyIDEncoding = base32.StdEncoding.WithPadding(base32.NoPadding)

// NewKey makes a new API key from rnd (crypto/rand.Reader when nil). It
// returns the plaintext, to be shown once and never stored, and the Key to
// store. The plaintext is "cpk_<key id>_<secret>": the key ID lets the GTR
// find the key without comparing against every hash.
func NewKey(rnd io.Reader, now time.Time) (string, Key, error) {
	if rnd == nil {
		rnd = rand.Reader
	}
	var id [10]byte
	var secret [32]byte
	if _, err := io.ReadFull(rnd, id[:]); err != nil {
		return "", Key{}, fmt.Errorf("partners: new key: %w", err)
	}
	if _, err := io.ReadFull(rnd, secret[:]); err != nil {
		return "", Key{}, fmt.Errorf("partners: new key: %w", err)
	}
	kid := strings.ToLower(keyIDEncoding.EncodeToString(id[:]))
	sec := hex.EncodeToString(secret[:])
	return keyPrefix + kid + "_" + sec, Key{ID: kid, Hash: hashSecret(sec), Created: now.UTC().Truncate(time.Second)}, nil
}

// ParseKey splits an API key into its key ID and secret. The error never
// quotes the key.
func ParseKey(s string) (id, secret string, err error) {
	if len(s) != maxKeyLen || !strings.HasPrefix(s, keyPrefix) || s[len(keyPrefix)+keyIDLen] != '_' {
		return "", "", ErrUnauthenticated
	}
	id = s[len(keyPrefix) : len(keyPrefix)+keyIDLen]
	secret = s[len(keyPrefix)+keyIDLen+1:]
	if !keyIDRe.MatchString(id) || !isLowerHex(secret) {
		return "", "", ErrUnauthenticated
	}
	return id, secret, nil
}

// KeyID returns the key ID of an API key, or "" when it is malformed. It is
// safe to log; the secret is not.
func KeyID(apiKey string) string {
	id, _, err := ParseKey(apiKey)
	if err != nil {
		return ""
	}
	return id
}

func isLowerHex(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

func hashSecret(secret string) string {
	sum := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(sum[:])
}

// Index is a compiled, immutable registry. Its methods are safe for
// concurrent use and never block.
type Index struct {
	reg  *Registry
	keys map[string]indexedKey // by key ID
	byID map[string]*Partner
}

type indexedKey struct {
	hash    [sha256.Size]byte
	partner *Partner
}

// Compile validates r and builds its Index. r must not change afterwards.
func Compile(r *Registry) (*Index, error) {
	if err := r.Validate(); err != nil {
		return nil, err
	}
	ix := &Index{reg: r, keys: map[string]indexedKey{}, byID: make(map[string]*Partner, len(r.Partners))}
	for i := range r.Partners {
		p := &r.Partners[i]
		ix.byID[p.ID] = p
		for _, k := range p.Keys {
			var h [sha256.Size]byte
			if _, err := hex.Decode(h[:], []byte(k.Hash)); err != nil {
				return nil, fmt.Errorf("%w: partner %s: key %s: hash: %v", ErrInvalid, p.ID, k.ID, err)
			}
			ix.keys[k.ID] = indexedKey{hash: h, partner: p}
		}
	}
	return ix, nil
}

// Registry returns the registry the index was compiled from; callers must
// not change it.
func (ix *Index) Registry() *Registry { return ix.reg }

// Version is the registry's version.
func (ix *Index) Version() uint64 { return ix.reg.Version }

// Partner returns a partner by ID.
func (ix *Index) Partner(id string) (*Partner, bool) {
	p, ok := ix.byID[id]
	return p, ok
}

// Authenticate returns the partner that apiKey belongs to. The secret is
// compared in constant time. It returns ErrUnauthenticated for a malformed,
// unknown, revoked or wrong key, and ErrSuspended (with the partner) for a
// good key of a suspended partner.
func (ix *Index) Authenticate(apiKey string) (*Partner, error) {
	id, secret, err := ParseKey(apiKey)
	if err != nil {
		return nil, ErrUnauthenticated
	}
	k, ok := ix.keys[id]
	got := sha256.Sum256([]byte(secret))
	if !ok {
		return nil, ErrUnauthenticated
	}
	if subtle.ConstantTimeCompare(got[:], k.hash[:]) != 1 {
		return nil, ErrUnauthenticated
	}
	if k.partner.Status != StatusActive {
		return k.partner, ErrSuspended
	}
	return k.partner, nil
}

// Allows reports whether the partner may send a transaction in market of
// paymentType; empty lists allow everything. It names the refused field.
func (p *Partner) Allows(market, paymentType string) (field string, ok bool) {
	if len(p.Markets) > 0 && !slices.Contains(p.Markets, market) {
		return "market", false
	}
	if len(p.PaymentTypes) > 0 && !slices.Contains(p.PaymentTypes, paymentType) {
		return "payment_type", false
	}
	return "", true
}

// EffectiveLimits returns the partner's limits with defaults filled in.
func (p *Partner) EffectiveLimits() Limits {
	l := p.Limits
	if l.RatePerSecond == 0 {
		l.RatePerSecond = defaultRatePerSecond
	}
	if l.Burst == 0 {
		l.Burst = max(1, int(l.RatePerSecond))
	}
	if l.MaxInFlight == 0 {
		l.MaxInFlight = max(1, int(l.RatePerSecond))
	}
	return l
}
