package refsync

import (
	"fmt"
	"time"

	"github.com/cellpay/cellpay/internal/refdata"
)

// The in-memory copy is the served *refdata.Snapshot itself: validated,
// immutable, its rates parsed once, published through an atomic pointer
// (Syncer.cur). A reader loads the pointer once per attempt and reads one
// whole version with no lock; an apply builds the next snapshot off to the
// side and swaps the pointer. There is no second copy to keep in step
// with it (issue #11: before, the snapshot, a go-memdb copy and Postgres).

// metaRow is how the served version arrived.
type metaRow struct {
	Source      string
	PublishedAt time.Time
	AppliedAt   time.Time
}

// View is one version of the reference data as a transaction sees it: the
// snapshot served when it was taken, so every lookup of one attempt
// answers from the same version even while a newer one is applied. It
// implements cellside.RefData. The zero View serves nothing (version
// ""). Reads take no lock.
type View struct{ snap *refdata.Snapshot }

// Version is the served version in decimal; "" when none is served.
func (v View) Version() string {
	if v.snap == nil {
		return ""
	}
	return v.snap.Version()
}

// Seq is the served version; 0 when none is served or for a bootstrap file.
func (v View) Seq() uint64 {
	if v.snap == nil {
		return 0
	}
	return v.snap.Seq()
}

// SettlementCurrency returns the partner's settlement currency, or the
// default one.
func (v View) SettlementCurrency(partner string) string {
	if v.snap == nil {
		return ""
	}
	return v.snap.SettlementCurrency(partner)
}

// Convert converts as refdata.Snapshot.Convert does.
func (v View) Convert(minor int64, from, to string) (int64, error) {
	if v.snap == nil {
		if from == to {
			return minor, nil
		}
		return 0, fmt.Errorf("%w %s", refdata.ErrNoRate, from)
	}
	return v.snap.Convert(minor, from, to)
}

// MCC classifies a merchant category code.
func (v View) MCC(code string) (refdata.MCC, bool) {
	if v.snap == nil {
		return refdata.MCC{}, false
	}
	return v.snap.MCC(code)
}

// Blocked reports whether a category is blocked.
func (v View) Blocked(category string) bool {
	return v.snap != nil && v.snap.Blocked(category)
}
