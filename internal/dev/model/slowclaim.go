package model

import (
	"errors"

	"github.com/cellpay/cellpay/internal/pnr/cellside"
)

// A slow claim: a cell's directory write outlasts its bound (OpTimeout),
// its answer lost, the entry written or not. The cell's machine hears
// ClaimFailed and nothing says an outage (one slow claim is not one:
// cmd/cell/internal/directory/outage.go), so even the natural home
// re-routes the attempt, as a frozen site's cell does on its thaw
// (docs/design/sites.md, "What a frozen site finds"). The write that
// landed is this cell's claim of the attempt, which the next cell finds
// held and the redirect brings back here. Follow-ups' claims are not
// slowed here.

// maxSlow bounds the faults armed per cell.
const maxSlow = 3

// armSlowClaim arms a fault for a cell's next claim, the seed choosing
// the cell and whether the write lands.
func (m *model) armSlowClaim(r chooser) bool {
	i := r.IntN(numCells)
	if len(m.slow[i]) == maxSlow {
		return false
	}
	written := r.IntN(2) == 0
	m.slow[i] = append(m.slow[i], written)
	m.logf("cell %d: its next claim outlasts its bound (written %v)", i, written)
	return true
}

// slowClaim answers run's claim a with the next fault armed for its cell,
// if any: the entry written first or not, then ClaimFailed.
func (m *model) slowClaim(r *run, a cellside.Claim) (cellside.Event, bool) {
	faults := m.slow[r.x.cell]
	if len(faults) == 0 {
		return nil, false
	}
	written := faults[0]
	m.slow[r.x.cell] = faults[1:]
	m.cover(covSlowClaim)
	if written {
		m.claim(r, a)
		m.cover(covSlowClaimWritten)
	}
	m.logf("cell %d: %s's claim timed out (written %v)", r.x.cell, r.x.id, written)
	return cellside.ClaimFailed{Err: errors.New("directory: claim timed out"), Outage: m.rules.SlowClaimIsOutage}, true
}
