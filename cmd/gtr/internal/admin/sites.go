package admin

import (
	"context"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/cellpay/cellpay/cmd/gtr/internal/state"
	"github.com/cellpay/cellpay/pkg/adminproto"
	"github.com/cellpay/cellpay/pkg/routing"
)

// siteOp is a change of every cell of a site in the Doc:
// (*state.Doc).EvacuateSite or RestoreSite.
type siteOp func(d *state.Doc, site string, now time.Time, over time.Duration) error

// EvacuateSite takes every cell of a site to weight 0, now or ramped, in
// one change of the table (state.Doc.EvacuateSite); with dry_run it
// reports the keys that would move instead.
func (s *Server) EvacuateSite(ctx context.Context, req *adminproto.EvacuateSiteRequest) (*adminproto.SiteChange, error) {
	return s.siteChange(ctx, "evacuated", req.GetSite(), req.GetOver(), req.GetDryRun(), req.GetSamples(), (*state.Doc).EvacuateSite)
}

// RestoreSite returns every cell of a site to its table weight, now or
// ramped, in one change of the table (state.Doc.RestoreSite); with
// dry_run it reports the keys that would move instead.
func (s *Server) RestoreSite(ctx context.Context, req *adminproto.RestoreSiteRequest) (*adminproto.SiteChange, error) {
	return s.siteChange(ctx, "restored", req.GetSite(), req.GetOver(), req.GetDryRun(), req.GetSamples(), (*state.Doc).RestoreSite)
}

// siteChange runs op over site's cells. A dry run applies op to a copy of
// the Doc in force with no ramp (the state once any ramp has ended),
// compiles it as this replica would, and routes the same sampled keys
// through the table in force and that one, as ApplyTable's dry run does;
// it changes nothing and answers with the site's cells as they are. A
// real change goes through the store, as a cell's weight change does,
// and answers with the site's cells after it. done names the change in
// the log.
func (s *Server) siteChange(ctx context.Context, done, site string, overpb *durationpb.Duration, dryRun bool, samplesReq int32, op siteOp) (*adminproto.SiteChange, error) {
	over, err := duration(overpb)
	if err != nil {
		return nil, err
	}
	samples, err := drySamples(samplesReq)
	if err != nil {
		return nil, err
	}
	resp := &adminproto.SiteChange{Site: site}
	if dryRun {
		cur := s.cfg.State.Table()
		have, _, ok := s.cfg.State.Doc()
		if cur == nil || !ok {
			return nil, errNoTable()
		}
		now := s.cfg.State.Now()
		next := have.Clone()
		if err := op(&next, site, now, 0); err != nil {
			return nil, toStatus(err)
		}
		nt, err := routing.Compile(s.cfg.State.SpecFor(next))
		if err != nil {
			return nil, toStatus(err)
		}
		resp.Version, resp.Samples = next.Version, int32(samples)
		resp.Moves = moves(cur, nt, samples, s.homeSites())
		resp.Cells = s.siteCells(have, site, now)
		return resp, nil
	}
	d, err := s.cfg.Store.Update(ctx, func(d *state.Doc) error { return op(d, site, s.cfg.State.Now(), over) })
	if err != nil {
		return nil, toStatus(err)
	}
	resp.Version, resp.Applied = d.Version, true
	resp.Cells = s.siteCells(d, site, s.cfg.State.Now())
	s.cfg.Log.Info("admin: site "+done, "site", site, "cells", len(resp.Cells), "over", over, "version", d.Version)
	return resp, nil
}

// siteCells is the status of every cell of d in site, in the table's
// order, unsampled (traffic share -1).
func (s *Server) siteCells(d state.Doc, site string, now time.Time) []*adminproto.CellStatus {
	var out []*adminproto.CellStatus
	for _, c := range d.Cells {
		if c.Site == site {
			out = append(out, s.cellStatus(c, now, -1))
		}
	}
	return out
}
