package model

// Two sites: GTR replica 0 with cells 0 and 1 in one, replica 1 with
// cell 2 in the other; what they share (the directory, the issuer, the
// stores' own media) stays reachable from both, as on one host today
// (docs/design/sites.md, "A site cut off"). A cut of the line between
// them holds every message between a replica and a cell of the other
// site, both ways, until it is mended, as a partition's dropped packets
// do: an attempt across it ends by its timer (attempt-timeout) and is
// re-routed, a Proceed or an outcome across it arrives late or never.
// The checks are the same invariants, after every step.

var (
	replicaSite = [numReplicas]int{0, 1}
	cellSite    = [numCells]int{0, 0, 1}
)

// cutSites cuts the line between the sites (cut) or mends it; false when
// it already is so.
func (m *model) cutSites(cut bool) bool {
	if m.cut == cut {
		return false
	}
	m.cut = cut
	if cut {
		m.logf("the line between the sites cut")
	} else {
		m.logf("the line between the sites back")
	}
	return true
}

// across reports whether x travels between a GTR replica and a cell of
// the other site.
func (m *model) across(x msg) bool {
	var g int
	switch x.kind {
	case mProcess, mCancel, mProceed, mPNR, mResult, mReroutable, mProceeding:
		g = m.calls[x.call].replica
	case mFollowUp, mFollowUpResp:
		g = m.fuCalls[x.call].replica
	default:
		return false
	}
	return replicaSite[g] != cellSite[x.cell]
}
