package admin

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/cellpay/cellpay/cmd/gtr/internal/audit"
	"github.com/cellpay/cellpay/pkg/adminproto"
)

// AuditLog is where every change is recorded. *audit.Log implements it.
type AuditLog interface {
	// Reserve promises room for one record before a change is made;
	// audit.ErrUnavailable means the change must not be made.
	Reserve() (*audit.Reservation, error)
	// Write records a call that changed nothing (a refused one).
	Write(ctx context.Context, rec audit.Record) error
	// List is the newest limit records at or after since, oldest first.
	List(ctx context.Context, since time.Time, limit int) ([]audit.Record, error)
	// Pending counts records in the local spool, not yet in the stream.
	Pending() int
}

// ServerOptions install the admin listener's interceptors: auth (who,
// and may they), then the audit of changes.
func (s *Server) ServerOptions(auth *Auth) []grpc.ServerOption {
	auth.denied = func(ctx context.Context, rec audit.Record) {
		if err := s.cfg.Audit.Write(ctx, rec); err != nil {
			s.cfg.Log.Warn("admin: refused call not audited", "method", rec.Method, "actor", rec.Actor, "err", err)
		}
	}
	return []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(auth.Unary, s.audit),
		grpc.ChainStreamInterceptor(auth.Stream),
	}
}

// audit runs a change between a reservation in the audit log and its
// record: a change the log cannot promise to keep is refused (UNAVAILABLE)
// before it is made; a change made is answered only once its record is in
// the stream or the synced spool.
func (s *Server) audit(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if !audited(info.FullMethod) {
		return handler(ctx, req)
	}
	res, err := s.cfg.Audit.Reserve()
	if err != nil {
		return nil, status.Errorf(codes.Unavailable, "change refused, nothing changed: %v", err)
	}
	op, _ := OperatorFrom(ctx)
	name := shortName(info.FullMethod)
	rec := audit.Record{Time: time.Now(), Actor: op.ID, Role: op.Role.String(), Method: name, Request: requestJSON(req)}
	rec.Before = s.view(name, req, nil)
	resp, herr := handler(ctx, req)
	rec.Outcome = status.Code(herr).String()
	if herr != nil {
		rec.Error = status.Convert(herr).Message()
	} else {
		rec.After = s.view(name, req, resp)
	}
	if err := res.Commit(ctx, rec); err != nil {
		s.cfg.Log.Error("admin: audit record not written", "method", name, "actor", op.ID, "err", err)
		if herr == nil {
			return nil, status.Errorf(codes.Internal, "%s was applied but its audit record could not be written: %v", name, err)
		}
	}
	return resp, herr
}

// maxRequestJSON bounds a request's copy in a record.
const maxRequestJSON = 64 << 10

// requestJSON is the request as JSON. No Admin request carries a key or a
// secret (those are only ever in answers, which are never recorded whole).
// A drill's report is recorded by its ID and sizes: the report itself is
// kept in its own bucket.
func requestJSON(req any) json.RawMessage {
	if r, ok := req.(*adminproto.RecordDrillRequest); ok {
		return drillRequestJSON(r)
	}
	m, ok := req.(proto.Message)
	if !ok {
		return nil
	}
	b, err := protojson.Marshal(m)
	if err != nil {
		return nil
	}
	if len(b) > maxRequestJSON {
		b, _ = json.Marshal(map[string]any{"truncated": true, "bytes": len(b)})
	}
	return b
}

// cellView is a cell's weights as a record shows them before and after.
type cellView struct {
	Cell         string `json:"cell"`
	TableVersion uint64 `json:"table_version,omitempty"`
	// Weight is where any ramp ends; WeightNow is in force now.
	Weight      int32      `json:"weight"`
	WeightNow   int32      `json:"weight_now"`
	TableWeight int32      `json:"table_weight"`
	RampEnd     *time.Time `json:"ramp_end,omitempty"`
}

func viewOfCell(c *adminproto.CellStatus, version uint64) cellView {
	v := cellView{Cell: c.GetId(), TableVersion: version, Weight: c.GetTargetWeight(), WeightNow: c.GetWeight(), TableWeight: c.GetTableWeight()}
	if r := c.GetRamp(); r != nil {
		end := r.GetEnd().AsTime()
		v.RampEnd = &end
	}
	return v
}

type partnerView struct {
	RegistryVersion uint64              `json:"registry_version"`
	Partner         *adminproto.Partner `json:"-"`
}

// MarshalJSON writes the partner with protojson (as the API shows it:
// key IDs, never hashes; a count of signing secrets, never a secret).
func (p partnerView) MarshalJSON() ([]byte, error) {
	pj := json.RawMessage("null")
	if p.Partner != nil {
		b, err := protojson.Marshal(p.Partner)
		if err != nil {
			return nil, err
		}
		pj = b
	}
	return json.Marshal(struct {
		RegistryVersion uint64          `json:"registry_version"`
		Partner         json.RawMessage `json:"partner"`
	}{p.RegistryVersion, pj})
}

type partnerChange interface {
	GetPartner() *adminproto.Partner
	GetRegistryVersion() uint64
}

type partnerRequest interface{ GetPartnerId() string }

// view is the state a change touches, as JSON: before it (resp nil), read
// from this replica, or after it, read from the answer. The answers of
// AddPartner, AddKey and AddCallbackSecret carry a key or secret in
// plaintext: only their partner and registry version are taken.
func (s *Server) view(method string, req, resp any) json.RawMessage {
	var v any
	switch method {
	case "SetWeight", "Drain", "Restore":
		id := req.(interface{ GetCellId() string }).GetCellId()
		if resp != nil {
			v = viewOfCell(resp.(*adminproto.CellStatus), 0)
			break
		}
		d, _, ok := s.cfg.State.Doc()
		if c := d.Cell(id); ok && c != nil {
			v = viewOfCell(s.cellStatus(*c, s.cfg.State.Now(), -1), d.Version)
		}
	case "ApplyTable":
		if resp != nil {
			r := resp.(*adminproto.ApplyTableResponse)
			after := map[string]any{"version": r.GetVersion(), "applied": r.GetApplied()}
			if r.GetApplied() {
				after["cells"] = cellWeights(req.(*adminproto.ApplyTableRequest).GetTable())
			}
			v = after
			break
		}
		if d, _, ok := s.cfg.State.Doc(); ok {
			v = map[string]any{"version": d.Version, "cells": cellWeights(docToProto(d))}
		}
	case "EvacuateSite", "RestoreSite":
		// A dry run is audited like the change (an operator's call) and
		// its after says applied false; only a change's after has cells,
		// as ApplyTable's.
		site := req.(interface{ GetSite() string }).GetSite()
		if resp != nil {
			r := resp.(*adminproto.SiteChange)
			after := map[string]any{"site": r.GetSite(), "version": r.GetVersion(), "applied": r.GetApplied()}
			if r.GetApplied() {
				cells := []cellView{}
				for _, c := range r.GetCells() {
					cells = append(cells, viewOfCell(c, r.GetVersion()))
				}
				after["cells"] = cells
			}
			v = after
			break
		}
		if d, _, ok := s.cfg.State.Doc(); ok {
			cells := []cellView{}
			for _, c := range s.siteCells(d, site, s.cfg.State.Now()) {
				cells = append(cells, viewOfCell(c, d.Version))
			}
			v = map[string]any{"site": site, "version": d.Version, "cells": cells}
		}
	case "ReplayCallbacks":
		if resp != nil {
			v = map[string]any{"replayed": resp.(*adminproto.ReplayCallbacksResponse).GetReplayed()}
		}
	case "RecordDrill":
		if resp != nil {
			r := resp.(*adminproto.RecordDrillResponse)
			sum := r.GetSummary()
			v = map[string]any{"id": r.GetId(), "created": r.GetCreated(), "start": sum.GetStart().AsTime(), "passed": sum.GetPassed(), "signer": sum.GetSigner()}
		}
	case "ReleaseCell":
		r := req.(*adminproto.ReleaseCellRequest)
		if resp != nil {
			v = map[string]any{"cell": r.GetCellId(), "reason": r.GetReason(), "revision": resp.(*adminproto.ReleaseCellResponse).GetRevision()}
		} else {
			v = map[string]any{"cell": r.GetCellId(), "reason": r.GetReason()}
		}
	default:
		if resp != nil {
			if pc, ok := resp.(partnerChange); ok {
				v = partnerView{RegistryVersion: pc.GetRegistryVersion(), Partner: pc.GetPartner()}
			}
			break
		}
		if pr, ok := req.(partnerRequest); ok {
			ix := s.cfg.Partners.Index()
			pv := partnerView{RegistryVersion: ix.Version()}
			if p, ok := ix.Partner(pr.GetPartnerId()); ok {
				pv.Partner = partnerToProto(p)
			}
			v = pv
		}
	}
	if v == nil {
		return nil
	}
	b, err := json.Marshal(v)
	if err != nil {
		return nil
	}
	return b
}

func cellWeights(t *adminproto.Table) map[string]int32 {
	w := map[string]int32{}
	for _, c := range t.GetCells() {
		w[c.GetId()] = c.GetWeight()
	}
	return w
}

// Limits of ListAudit.
const (
	defAuditLimit = 100
	maxAuditLimit = 10000
)

func (s *Server) ListAudit(ctx context.Context, req *adminproto.ListAuditRequest) (*adminproto.ListAuditResponse, error) {
	limit := int(req.GetLimit())
	switch {
	case limit < 0 || limit > maxAuditLimit:
		return nil, fieldError("limit", "want 0 (the default, 100) to 10000")
	case limit == 0:
		limit = defAuditLimit
	}
	var since time.Time
	if req.GetSince() != nil {
		since = req.GetSince().AsTime()
	}
	recs, err := s.cfg.Audit.List(ctx, since, limit)
	if errors.Is(err, audit.ErrUnavailable) {
		return nil, status.Errorf(codes.Unavailable, "%v", err)
	} else if err != nil {
		return nil, status.Errorf(codes.Internal, "%v", err)
	}
	resp := &adminproto.ListAuditResponse{Pending: int32(s.cfg.Audit.Pending())}
	for _, r := range recs {
		resp.Records = append(resp.Records, &adminproto.AuditRecord{
			Id: r.ID, Time: timestamppb.New(r.Time), Actor: r.Actor, Role: r.Role, Method: r.Method,
			Request: string(r.Request), Before: string(r.Before), After: string(r.After),
			Outcome: r.Outcome, Error: r.Error, Replica: r.Replica,
		})
	}
	return resp, nil
}

// noAudit is the audit log of a Server configured without one: it keeps
// nothing, so every change is refused.
type noAudit struct{}

func (noAudit) Reserve() (*audit.Reservation, error) {
	return nil, errors.New("no audit log configured")
}
func (noAudit) Write(context.Context, audit.Record) error {
	return errors.New("no audit log configured")
}
func (noAudit) List(context.Context, time.Time, int) ([]audit.Record, error) { return nil, nil }
func (noAudit) Pending() int                                                 { return 0 }
