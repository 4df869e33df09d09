package partners

import (
	"errors"
	"fmt"
	"slices"

	"github.com/cellpay/cellpay/pkg/routing"
)

// Errors of the registry's operations; callers branch on them. Their
// messages name partners and key IDs, never a key.
var (
	ErrNotFound    = errors.New("partners: no such partner")
	ErrExists      = errors.New("partners: partner already exists")
	ErrKeyNotFound = errors.New("partners: no such key")
	// ErrLastKey: revoking the key would leave the partner without one,
	// which RevokeKey does only when forced.
	ErrLastKey = errors.New("partners: the partner's last key")
	// ErrTooManyKeys: the partner has MaxKeysPerPartner keys already.
	ErrTooManyKeys = errors.New("partners: too many keys")
)

// IsPartnerID reports whether s is a well-formed partner ID.
func IsPartnerID(s string) bool { return partnerIDRe.MatchString(s) }

// IsKeyID reports whether s is a well-formed key ID (not a key: an API key
// is never a key ID).
func IsKeyID(s string) bool { return keyIDRe.MatchString(s) }

// Add appends p to the registry, or answers ErrExists when its ID is
// taken. It does not validate p: Validate the registry afterwards.
func (r *Registry) Add(p Partner) error {
	if _, ok := r.Find(p.ID); ok {
		return fmt.Errorf("%w: %q", ErrExists, p.ID)
	}
	r.Partners = append(r.Partners, p)
	return nil
}

// Get is Find with ErrNotFound.
func (r *Registry) Get(id string) (*Partner, error) {
	p, ok := r.Find(id)
	if !ok {
		return nil, fmt.Errorf("%w: %q", ErrNotFound, id)
	}
	return p, nil
}

// SetStatus sets partner id's status (StatusActive or StatusSuspended) and
// reports whether that changed anything.
func (r *Registry) SetStatus(id, status string) (changed bool, err error) {
	if status != StatusActive && status != StatusSuspended {
		return false, fmt.Errorf("%w: status %q", ErrInvalid, status)
	}
	p, err := r.Get(id)
	if err != nil {
		return false, err
	}
	if p.Status == status {
		return false, nil
	}
	p.Status = status
	return true, nil
}

// SetHomeSite sets partner id's home site: site in routing.CheckSite's
// form, or "" for none. changed is false when it already was.
func (r *Registry) SetHomeSite(id, site string) (changed bool, err error) {
	if err := routing.CheckSite(site); err != nil {
		return false, fieldErr("home_site", "%v", err)
	}
	p, err := r.Get(id)
	if err != nil {
		return false, err
	}
	if p.HomeSite == site {
		return false, nil
	}
	p.HomeSite = site
	return true, nil
}

// AddKey gives partner id the key k (from NewKey).
func (r *Registry) AddKey(id string, k Key) error {
	p, err := r.Get(id)
	if err != nil {
		return err
	}
	if len(p.Keys) >= MaxKeysPerPartner {
		return fmt.Errorf("%w: partner %q has %d, at most %d; revoke one first", ErrTooManyKeys, id, len(p.Keys), MaxKeysPerPartner)
	}
	p.Keys = append(p.Keys, k)
	return nil
}

// RevokeKey removes key keyID from partner id. It refuses with ErrLastKey
// to leave the partner without a key unless force is set.
func (r *Registry) RevokeKey(id, keyID string, force bool) error {
	p, err := r.Get(id)
	if err != nil {
		return err
	}
	if !IsKeyID(keyID) { // never quote it: it may be a key pasted by mistake
		return fmt.Errorf("%w: not a key ID", ErrKeyNotFound)
	}
	i := slices.IndexFunc(p.Keys, func(k Key) bool { return k.ID == keyID })
	if i < 0 {
		return fmt.Errorf("%w: partner %q has no key %q", ErrKeyNotFound, id, keyID)
	}
	if len(p.Keys) == 1 && !force {
		return fmt.Errorf("%w: %q is partner %q's only key; revoking it refuses all its calls (force to do it anyway)", ErrLastKey, keyID, id)
	}
	p.Keys = slices.Delete(p.Keys, i, i+1)
	return nil
}
