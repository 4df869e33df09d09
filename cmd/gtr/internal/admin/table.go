package admin

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/cellpay/cellpay/cmd/gtr/internal/state"
	"github.com/cellpay/cellpay/internal/kvsync"
	"github.com/cellpay/cellpay/pkg/adminproto"
	"github.com/cellpay/cellpay/pkg/routing"
)

// errStaleVersion is ApplyTable's expected_version not matching.
var errStaleVersion = errors.New("stale expected_version")

func (s *Server) ApplyTable(ctx context.Context, req *adminproto.ApplyTableRequest) (*adminproto.ApplyTableResponse, error) {
	if req.GetTable() == nil {
		return nil, fieldError("table", "is required")
	}
	samples, err := drySamples(req.GetSamples())
	if err != nil {
		return nil, err
	}
	spec, err := tableFromProto(req.GetTable())
	if err != nil {
		return nil, toStatus(err)
	}
	if spec.Version == 0 {
		return nil, fieldError("table.version", "must be 1 or more")
	}
	if err := routing.Validate(spec); err != nil {
		return nil, toStatus(err)
	}
	// The authoritative version checks run in the store against the entry
	// being replaced; this one answers early from what this replica has.
	check := func(cur uint64) error {
		if e := req.GetExpectedVersion(); e != 0 && e != cur {
			return fmt.Errorf("%w: expected_version %d, the version in force is %d", errStaleVersion, e, cur)
		}
		if spec.Version <= cur {
			return &state.FieldError{Field: "table.version", Reason: fmt.Sprintf("%d must be greater than the version in force, %d", spec.Version, cur)}
		}
		return nil
	}
	cur := s.cfg.State.Table()
	have, _, ok := s.cfg.State.Doc()
	if cur == nil || !ok {
		return nil, errNoTable()
	}
	if err := check(cur.Version()); err != nil {
		return nil, toStatus(err)
	}
	next := have.WithTable(spec)
	resp := &adminproto.ApplyTableResponse{Version: next.Version}
	if req.GetDryRun() {
		nt, err := routing.Compile(s.cfg.State.SpecFor(next))
		if err != nil {
			return nil, toStatus(err)
		}
		resp.Samples = int32(samples)
		resp.Moves = moves(cur, nt, samples, s.homeSites())
		return resp, nil
	}
	if _, err := s.cfg.Store.Update(ctx, func(d *state.Doc) error {
		if err := check(d.Version); err != nil {
			return err
		}
		// Over the entry being replaced: a drain made meanwhile is kept.
		*d = d.WithTable(spec)
		return nil
	}); err != nil {
		return nil, toStatus(err)
	}
	s.cfg.Log.Info("admin: table applied", "version", next.Version, "cells", len(next.Cells), "rules", len(next.Rules))
	resp.Applied = true
	return resp, nil
}

// drySamples is a dry run's samples as asked for: 0 is defDrySamples,
// anything outside 0..maxDrySamples is refused naming samples.
func drySamples(n int32) (int, error) {
	switch {
	case n < 0 || n > maxDrySamples:
		return 0, fieldError("samples", fmt.Sprintf("%d outside 0..%d", n, maxDrySamples))
	case n == 0:
		return defDrySamples, nil
	}
	return int(n), nil
}

// moves routes the same synthetic keys through both tables and counts them
// by (old home, new home), largest first; sites are the partners' home
// sites.
func moves(old, next *routing.Table, n int, sites map[string]string) []*adminproto.Move {
	attrs := syntheticAttrs(n, sites, old.Spec(), next.Spec())
	a, b := homes(old, attrs), homes(next, attrs)
	type pair struct{ from, to string }
	counts := map[pair]int{}
	for i := range attrs {
		counts[pair{a[i], b[i]}]++
	}
	var out []*adminproto.Move
	for p, k := range counts {
		out = append(out, &adminproto.Move{FromCell: p.from, ToCell: p.to, Keys: int32(k), Share: float64(k) / float64(n)})
	}
	slices.SortFunc(out, func(x, y *adminproto.Move) int {
		if x.Keys != y.Keys {
			return int(y.Keys - x.Keys)
		}
		return strings.Compare(x.FromCell+"\x00"+x.ToCell, y.FromCell+"\x00"+y.ToCell)
	})
	return out
}

func tableFromProto(t *adminproto.Table) (routing.Spec, error) {
	s := routing.Spec{Version: t.GetVersion()}
	for _, c := range t.GetCells() {
		s.Cells = append(s.Cells, routing.Cell{ID: c.GetId(), Addr: c.GetAddr(), Addrs: c.GetAddrs(), Pool: c.GetPool(), Weight: int(c.GetWeight()), Site: c.GetSite()})
	}
	for i, p := range t.GetPools() {
		b, err := routing.ParseBalancer(p.GetBalancer())
		if err != nil {
			return s, &state.FieldError{Field: fmt.Sprintf("table.pools[%d].balancer", i), Reason: fmt.Sprintf("unknown balancer %q: round_robin, least_request or priority", p.GetBalancer())}
		}
		s.Pools = append(s.Pools, routing.Pool{Name: p.GetName(), Balancer: b, SpillBelow: int(p.GetSpillBelow())})
	}
	for i, r := range t.GetRules() {
		h, err := routing.ParseHashField(r.GetHashOn())
		if err != nil {
			return s, &state.FieldError{Field: fmt.Sprintf("table.rules[%d].hash_on", i), Reason: fmt.Sprintf("unknown hash field %q", r.GetHashOn())}
		}
		s.Rules = append(s.Rules, routing.Rule{
			Name: r.GetName(), Partners: r.GetPartners(), Markets: r.GetMarkets(), PaymentTypes: r.GetPaymentTypes(),
			Pool: r.GetPool(), HashOn: h, MinRefdataVersion: r.GetMinRefdataVersion(),
		})
	}
	return s, nil
}

// docToProto is the operator's table as the API shows it: each cell at its
// configured weight (where any ramp ends).
func docToProto(d state.Doc) *adminproto.Table {
	t := &adminproto.Table{Version: d.Version, Rules: rulesToProto(d.Rules), Pools: poolsToProto(d.Pools)}
	for _, c := range d.Cells {
		t.Cells = append(t.Cells, &adminproto.Cell{Id: c.ID, Addr: c.Addr, Addrs: c.Addrs, Pool: c.Pool, Weight: int32(c.Weight), Site: c.Site})
	}
	return t
}

func poolsToProto(pools []routing.Pool) []*adminproto.Pool {
	var out []*adminproto.Pool
	for _, p := range pools {
		out = append(out, &adminproto.Pool{Name: p.Name, Balancer: p.Balancer.String(), SpillBelow: int32(p.SpillBelow)})
	}
	return out
}

func rulesToProto(rules []routing.Rule) []*adminproto.Rule {
	var out []*adminproto.Rule
	for _, r := range rules {
		out = append(out, &adminproto.Rule{
			Name: r.Name, Partners: r.Partners, Markets: r.Markets, PaymentTypes: r.PaymentTypes,
			Pool: r.Pool, HashOn: r.HashOn.String(), MinRefdataVersion: r.MinRefdataVersion,
		})
	}
	return out
}

// duration reads an optional ramp duration.
func duration(d *durationpb.Duration) (time.Duration, error) {
	if d == nil {
		return 0, nil
	}
	if err := d.CheckValid(); err != nil {
		return 0, fieldError("over", err.Error())
	}
	v := d.AsDuration()
	if v < 0 {
		return 0, fieldError("over", fmt.Sprintf("negative duration %v", v))
	}
	if v > state.MaxRamp {
		return 0, fieldError("over", fmt.Sprintf("%v is longer than %v", v, state.MaxRamp))
	}
	return v, nil
}

func fieldError(field, reason string) error {
	return toStatus(&state.FieldError{Field: field, Reason: reason})
}

func errNoTable() error { return status.Error(codes.Unavailable, "no routing table loaded yet") }

// toStatus maps errors to the admin API's codes: bad input is
// INVALID_ARGUMENT with a BadRequest detail per field, an unknown cell or
// site NOT_FOUND, a stale expected version and an evacuation that would
// leave a pool without weight FAILED_PRECONDITION, an unreachable store
// UNAVAILABLE, lost races ABORTED.
func toStatus(err error) error {
	switch {
	case errors.Is(err, state.ErrUnknownCell), errors.Is(err, state.ErrUnknownSite):
		return status.Error(codes.NotFound, err.Error())
	case errors.Is(err, errStaleVersion), errors.Is(err, state.ErrSiteIsLast):
		return status.Error(codes.FailedPrecondition, err.Error())
	case errors.Is(err, kvsync.ErrUnavailable):
		return status.Error(codes.Unavailable, err.Error()+"; routing continues on the last-known table")
	case errors.Is(err, kvsync.ErrConflict):
		return status.Error(codes.Aborted, err.Error())
	}
	if v := violations(err); len(v) > 0 {
		return badRequest(strings.ReplaceAll(err.Error(), "\n", "; "), v)
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	return status.Error(codes.Internal, err.Error())
}

// violations collects the field errors in err (a FieldError, routing's
// SpecErrors, or several joined) as field violations named by the API's
// paths, e.g. table.cells[1].weight.
func violations(err error) []*errdetails.BadRequest_FieldViolation {
	var out []*errdetails.BadRequest_FieldViolation
	var walk func(error)
	walk = func(err error) {
		if j, ok := err.(interface{ Unwrap() []error }); ok {
			for _, e := range j.Unwrap() {
				walk(e)
			}
			return
		}
		var fe *state.FieldError
		var se *routing.SpecError
		switch {
		case errors.As(err, &fe):
			out = append(out, &errdetails.BadRequest_FieldViolation{Field: fe.Field, Description: fe.Reason})
		case errors.As(err, &se):
			field := "table"
			switch se.Of {
			case "cell":
				field = fmt.Sprintf("table.cells[%d]", se.Index)
			case "rule":
				field = fmt.Sprintf("table.rules[%d]", se.Index)
			case "pool":
				field = fmt.Sprintf("table.pools[%d]", se.Index)
			}
			if se.Field != "" {
				field += "." + snake(se.Field)
			}
			out = append(out, &errdetails.BadRequest_FieldViolation{Field: field, Description: se.Error()})
		}
	}
	walk(err)
	return out
}

// snake turns a Go field name into the proto's: PaymentTypes ->
// payment_types, ID -> id.
func snake(s string) string {
	var b strings.Builder
	prevLower := false
	for _, r := range s {
		upper := r >= 'A' && r <= 'Z'
		if upper {
			if prevLower {
				b.WriteByte('_')
			}
			r += 'a' - 'A'
		}
		prevLower = !upper
		b.WriteRune(r)
	}
	return b.String()
}

func badRequest(msg string, v []*errdetails.BadRequest_FieldViolation) error {
	st := status.New(codes.InvalidArgument, msg)
	if len(v) > 0 {
		if d, err := st.WithDetails(&errdetails.BadRequest{FieldViolations: v}); err == nil {
			st = d
		}
	}
	return st.Err()
}
