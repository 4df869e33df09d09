// Package admin implements the GTR's operator API, cellpay.admin.v1.Admin:
// list cells (with the reference data version each reports), set weights,
// drain and restore (now or ramped), evacuate and restore a site's cells
// together (sites.go), explain a route (including cells
// skipped for serving stale reference data), read or replace the routing
// table, manage the partner registry (list, add, suspend, resume, add
// and revoke API keys), and keep the drills' signed reports (drills.go).
//
// It reads the state.State and the health monitor of this replica, and
// labels what it shows: GetTable is the operator's table (configured
// weights), GetEffectiveTable the derived view this replica routes by
// (health shares, ramp positions, compiled weights). It writes through a Store (the
// NATS KV sync); partners are read and changed through a PartnerStore
// (replicated the same way), so a change made on any replica reaches all
// of them. It is served on the admin listener only, behind Auth (each
// operator's token and role, by the policy table of policy.go) and the
// audit of every change (audit.go, to cmd/gtr/internal/audit); it must
// never be registered on the partners' server. Nothing here is on the
// payment path.
package admin

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/cellpay/cellpay/cmd/gtr/internal/health"
	"github.com/cellpay/cellpay/cmd/gtr/internal/state"
	"github.com/cellpay/cellpay/pkg/adminproto"
	"github.com/cellpay/cellpay/pkg/routing"
)

// Store is where changes go. *routesync.Syncer implements it.
type Store interface {
	// Update applies fn to a copy of the replicated configuration and
	// stores the result, validated, with optimistic concurrency. fn may run
	// more than once; its errors come back unchanged. Errors besides fn's:
	// kvsync.ErrUnavailable, kvsync.ErrConflict, validation errors.
	Update(ctx context.Context, fn func(*state.Doc) error) (state.Doc, error)
	// Status is "connected", "disconnected" or "standalone".
	Status() string
}

// Health is this replica's view of the cells' health. *health.Monitor
// implements it; it owns health, and the admin API only reads it.
type Health interface {
	// Share is the cell's health share, 0 (down) to 100.
	Share(cellID string) int
	// Stats is the cell's outcome window: the one that ejects it.
	Stats(cellID string) health.CellStats
	// Instances is each instance of the cell by its latest check.
	Instances(cellID string) []health.InstanceHealth
}

// Config configures a Server.
type Config struct {
	State  *state.State // required
	Health Health       // required
	Store  Store        // required
	// Partners is the partner registry the partner RPCs read and change.
	// Required.
	Partners PartnerStore
	// ReplicaID names this replica in ListCells answers.
	ReplicaID string
	// Cells reaches the cells' outboxes for the callback RPCs; optional
	// (without it they answer UNIMPLEMENTED).
	Cells Cells
	// CellViews, if set, is every replica's own view of each cell, by
	// cell ID (package replicas), shown in ListCells.
	CellViews func(ctx context.Context) (map[string][]*adminproto.ReplicaCellView, error)
	// References finds refusals by the reference partners quote
	// (FindReference); optional (without it FindReference answers
	// UNIMPLEMENTED).
	References References
	// Releaser writes the directory's release records (ReleaseCell);
	// optional (without it ReleaseCell answers UNIMPLEMENTED).
	Releaser Releaser
	// Drills keeps the drills' signed reports (RecordDrill, ListDrills,
	// GetDrill), verified against DrillRoots, the platform's CA; without
	// both, those RPCs answer UNAVAILABLE.
	Drills     DrillStore
	DrillRoots *x509.CertPool
	// ShareSamples is how many synthetic keys ListCells routes to estimate
	// traffic shares; default 10000.
	ShareSamples int
	// Audit keeps a record of every change, written before the change
	// answers; without one (nil) every change is refused, since it could
	// not be audited. The gRPC interceptors of ServerOptions write it.
	Audit AuditLog
	Log   *slog.Logger
}

func (c *Config) validate() error {
	if c.State == nil || c.Health == nil || c.Store == nil || c.Partners == nil {
		return errors.New("admin: State, Health, Store and Partners are required")
	}
	if c.ShareSamples <= 0 {
		c.ShareSamples = 10000
	}
	if c.Log == nil {
		c.Log = slog.Default()
	}
	if c.Audit == nil {
		c.Audit = noAudit{}
	}
	return nil
}

// Server implements adminproto.AdminServer.
type Server struct {
	adminproto.UnimplementedAdminServer
	cfg Config
}

// New returns a Server.
func New(cfg Config) (*Server, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &Server{cfg: cfg}, nil
}

// Register registers the Admin service on gs, which must be the admin
// listener's server with s.ServerOptions' interceptors (auth and audit).
func (s *Server) Register(gs *grpc.Server) { adminproto.RegisterAdminServer(gs, s) }

// Limits on request sizes.
const (
	maxRouteKeys  = 200_000
	maxDrySamples = 1_000_000
	defDrySamples = 100_000
)

func (s *Server) ListCells(ctx context.Context, _ *adminproto.ListCellsRequest) (*adminproto.ListCellsResponse, error) {
	st := s.cfg.State
	tbl := st.Table()
	d, _, ok := st.Doc()
	if tbl == nil || !ok {
		return nil, errNoTable()
	}
	spec := tbl.Spec()
	share := map[string]int{}
	for _, h := range homes(tbl, syntheticAttrs(s.cfg.ShareSamples, s.homeSites(), spec)) {
		share[h]++
	}
	now := st.Now()
	var views map[string][]*adminproto.ReplicaCellView
	if s.cfg.CellViews != nil {
		var err error
		if views, err = s.cfg.CellViews(ctx); err != nil {
			s.cfg.Log.Warn("admin: the replicas' views of the cells", "error", err)
		}
	}
	resp := &adminproto.ListCellsResponse{TableVersion: tbl.Version(), ReplicaId: s.cfg.ReplicaID, ConfigStore: s.cfg.Store.Status()}
	for _, c := range d.Cells {
		cs := s.cellStatus(c, now, float64(share[c.ID])/float64(s.cfg.ShareSamples))
		cs.Balancer = tbl.Balancer(c.Pool).String()
		cs.Replicas = views[c.ID]
		resp.Cells = append(resp.Cells, cs)
	}
	return resp, nil
}

// instancesToProto is a cell's instances as its health monitor last saw
// them.
func instancesToProto(in []health.InstanceHealth) []*adminproto.InstanceStatus {
	out := make([]*adminproto.InstanceStatus, 0, len(in))
	for _, i := range in {
		is := &adminproto.InstanceStatus{Addr: i.Addr, Detail: i.Detail}
		switch i.State {
		case health.InstanceUp:
			is.Health = adminproto.Health_HEALTH_UP
		case health.InstanceDown:
			is.Health = adminproto.Health_HEALTH_DOWN
		}
		if !i.CheckedAt.IsZero() {
			is.CheckedAt = timestamppb.New(i.CheckedAt)
		}
		out = append(out, is)
	}
	return out
}

func (s *Server) cellStatus(c state.CellConfig, now time.Time, share float64) *adminproto.CellStatus {
	hs := s.cfg.Health.Share(c.ID)
	h := adminproto.Health_HEALTH_UP
	if hs <= 0 {
		h = adminproto.Health_HEALTH_DOWN
	}
	// The success rate is the monitor's window, the one that ejects.
	outcomes := s.cfg.Health.Stats(c.ID)
	cs := &adminproto.CellStatus{
		Id: c.ID, Addr: c.Addr, Pool: c.Pool, Site: c.Site, Health: h,
		// Weight is the operator's, before this replica's health scaling.
		Weight: int32(c.WeightAt(now)), TargetWeight: int32(c.Weight), TableWeight: int32(c.TableWeight),
		InFlight: s.cfg.State.Stats(c.ID).InFlight, SuccessRate: outcomes.SuccessRate, RecentRequests: int64(outcomes.Recent),
		TrafficShare: share, HealthShare: int32(hs),
		Addrs: c.Addrs, Instances: instancesToProto(s.cfg.Health.Instances(c.ID)),
	}
	if v, since := s.cfg.State.RefdataVersion(c.ID); !since.IsZero() {
		cs.RefdataVersion, cs.RefdataSince = v, timestamppb.New(since)
	}
	if c.Ramping(now) {
		cs.Ramp = &adminproto.Ramp{FromWeight: int32(c.Ramp.From), ToWeight: int32(c.Weight),
			Start: timestamppb.New(c.Ramp.Start), End: timestamppb.New(c.Ramp.End)}
	}
	return cs
}

// change runs a weight operation through the store and answers with the
// cell's new status.
func (s *Server) change(ctx context.Context, id string, op func(d *state.Doc, now time.Time) error) (*adminproto.CellStatus, error) {
	if id == "" {
		return nil, fieldError("cell_id", "is required")
	}
	d, err := s.cfg.Store.Update(ctx, func(d *state.Doc) error { return op(d, s.cfg.State.Now()) })
	if err != nil {
		return nil, toStatus(err)
	}
	c := d.Cell(id)
	if c == nil { // the op found it, so this cannot happen; say so if it does
		return nil, toStatus(fmt.Errorf("cell_id: %w %q", state.ErrUnknownCell, id))
	}
	s.cfg.Log.Info("admin: weight changed", "cell", id, "weight", c.Weight, "version", d.Version)
	return s.cellStatus(*c, s.cfg.State.Now(), -1), nil
}

func (s *Server) SetWeight(ctx context.Context, req *adminproto.SetWeightRequest) (*adminproto.CellStatus, error) {
	over, err := duration(req.GetOver())
	if err != nil {
		return nil, err
	}
	return s.change(ctx, req.GetCellId(), func(d *state.Doc, now time.Time) error {
		return d.SetWeight(req.GetCellId(), int(req.GetWeight()), now, over)
	})
}

func (s *Server) Drain(ctx context.Context, req *adminproto.DrainRequest) (*adminproto.CellStatus, error) {
	over, err := duration(req.GetOver())
	if err != nil {
		return nil, err
	}
	return s.change(ctx, req.GetCellId(), func(d *state.Doc, now time.Time) error {
		return d.Drain(req.GetCellId(), int(req.GetPercent()), now, over)
	})
}

func (s *Server) Restore(ctx context.Context, req *adminproto.RestoreRequest) (*adminproto.CellStatus, error) {
	over, err := duration(req.GetOver())
	if err != nil {
		return nil, err
	}
	return s.change(ctx, req.GetCellId(), func(d *state.Doc, now time.Time) error {
		return d.Restore(req.GetCellId(), now, over)
	})
}

func (s *Server) Explain(_ context.Context, req *adminproto.ExplainRequest) (*adminproto.ExplainResponse, error) {
	if req.GetAttrs() == nil {
		return nil, fieldError("attrs", "is required")
	}
	tbl := s.cfg.State.Table()
	if tbl == nil {
		return nil, errNoTable()
	}
	a := attrsFromProto(req.GetAttrs())
	a.HomeSite = s.homeSites()[a.PartnerID]
	e, err := tbl.Explain(&a)
	resp := &adminproto.ExplainResponse{
		TableVersion: e.Version, Rule: e.Rule.Name, HashOn: e.HashOn.String(), Key: e.Key, Text: e.String(),
		MinRefdataVersion: e.Rule.MinRefdataVersion, HomeSite: e.HomeSite, Across: e.Across,
	}
	if err != nil {
		resp.Error = err.Error()
	}
	if e.RuleIndex < 0 {
		resp.HashOn = ""
	}
	for _, m := range e.Misses {
		resp.Misses = append(resp.Misses, &adminproto.RuleMiss{Rule: m.Rule, Field: m.Field, Value: m.Value})
	}
	for _, c := range e.Cells {
		resp.Cells = append(resp.Cells, &adminproto.CellVerdict{
			CellId: c.Cell.ID, Rank: int32(c.Rank + 1), Bucket: int32(c.Bucket), Weight: int32(c.Cell.Weight),
			State: c.Cell.State.String(), Verdict: c.Verdict.String(), Why: c.Why(),
			RefdataVersion: c.Cell.RefdataVersion, Site: c.Cell.Site,
		})
	}
	return resp, nil
}

func (s *Server) RouteKeys(_ context.Context, req *adminproto.RouteKeysRequest) (*adminproto.RouteKeysResponse, error) {
	if n := len(req.GetAttrs()); n > maxRouteKeys {
		return nil, fieldError("attrs", fmt.Sprintf("%d entries, at most %d", n, maxRouteKeys))
	}
	tbl := s.cfg.State.Table()
	if tbl == nil {
		return nil, errNoTable()
	}
	attrs := make([]routing.Attrs, len(req.GetAttrs()))
	sites := s.homeSites()
	for i, a := range req.GetAttrs() {
		attrs[i] = attrsFromProto(a)
		attrs[i].HomeSite = sites[attrs[i].PartnerID]
	}
	return &adminproto.RouteKeysResponse{TableVersion: tbl.Version(), Home: homes(tbl, attrs)}, nil
}

// GetTable returns the operator's table, the Doc in force: configured
// weights, never this replica's compiled ones.
func (s *Server) GetTable(_ context.Context, _ *adminproto.GetTableRequest) (*adminproto.Table, error) {
	d, _, ok := s.cfg.State.Doc()
	if !ok {
		return nil, errNoTable()
	}
	return docToProto(d), nil
}

// GetEffectiveTable returns this replica's compiled table beside the
// configured weights and health shares it was derived from.
func (s *Server) GetEffectiveTable(_ context.Context, _ *adminproto.GetEffectiveTableRequest) (*adminproto.EffectiveTable, error) {
	tbl := s.cfg.State.Table()
	d, _, ok := s.cfg.State.Doc()
	if tbl == nil || !ok {
		return nil, errNoTable()
	}
	spec, now := tbl.Spec(), s.cfg.State.Now()
	resp := &adminproto.EffectiveTable{Version: spec.Version, ReplicaId: s.cfg.ReplicaID, Rules: rulesToProto(spec.Rules), Pools: poolsToProto(spec.Pools)}
	for _, c := range spec.Cells {
		ec := &adminproto.EffectiveCell{Id: c.ID, Addr: c.Addr, Addrs: c.Addrs, Pool: c.Pool, Site: c.Site, EffectiveWeight: int32(c.Weight),
			State: c.State.String(), RefdataVersion: c.RefdataVersion, HealthShare: int32(s.cfg.Health.Share(c.ID))}
		if dc := d.Cell(c.ID); dc != nil {
			ec.ConfiguredWeight, ec.RampWeight = int32(dc.Weight), int32(dc.WeightAt(now))
		}
		resp.Cells = append(resp.Cells, ec)
	}
	return resp, nil
}

func attrsFromProto(a *adminproto.Attrs) routing.Attrs {
	return routing.Attrs{
		TransactionID: a.GetTransactionId(), PartnerID: a.GetPartnerId(), Market: a.GetMarket(),
		PaymentType: a.GetPaymentType(), MerchantID: a.GetMerchantId(),
	}
}
