package admin

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/cellpay/cellpay/internal/partners"
	"github.com/cellpay/cellpay/pkg/adminproto"
	"github.com/cellpay/cellpay/pkg/cellproto"
	"github.com/cellpay/cellpay/pkg/idempotency"
	"github.com/cellpay/cellpay/pkg/routing"
	"github.com/cellpay/cellpay/pkg/webhook"
)

// Cells gives the client of a cell; *cellconn.Pool implements it.
type Cells interface {
	// Client returns a client for cell c, balanced over its instances by
	// b; it must not block on the network.
	Client(c *routing.Cell, b routing.Balancer) (cellproto.CellClient, error)
}

// cellCallTimeout bounds one cell's answer to a fanned-out callbacks RPC.
const cellCallTimeout = 5 * time.Second

// The callback RPCs set a partner's callback settings in the registry and
// reach the cells' outboxes. AddCallbackSecret's answer carries a signing
// secret, once; neither it nor any request is logged, and the audit lines
// name the partner and how many secrets it has.

func (s *Server) SetCallbacks(ctx context.Context, req *adminproto.SetCallbacksRequest) (*adminproto.PartnerChange, error) {
	id := req.GetPartnerId()
	if err := checkPartnerID(id); err != nil {
		return nil, err
	}
	out, version, err := s.changePartner(ctx, id, func(r *partners.Registry) error {
		p, err := r.Get(id)
		if err != nil {
			return err
		}
		p.Callbacks.Mode, p.Callbacks.Endpoints, p.Callbacks.Public = req.GetMode(), slices.Clone(req.GetEndpoints()), req.GetPublic()
		return p.Validate()
	})
	if err != nil {
		return nil, partnerStatus(err)
	}
	s.cfg.Log.Info("admin: partner callbacks set", "partner", id, "mode", out.Callbacks.Mode,
		"endpoints", len(out.Callbacks.Endpoints), "public", out.Callbacks.Public != "", "registry_version", version)
	return &adminproto.PartnerChange{Partner: partnerToProto(out), RegistryVersion: version}, nil
}

func (s *Server) AddCallbackSecret(ctx context.Context, req *adminproto.AddCallbackSecretRequest) (*adminproto.AddCallbackSecretResponse, error) {
	id := req.GetPartnerId()
	if err := checkPartnerID(id); err != nil {
		return nil, err
	}
	secret, err := webhook.NewSecret(nil)
	if err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	out, version, err := s.changePartner(ctx, id, func(r *partners.Registry) error {
		p, err := r.Get(id)
		if err != nil {
			return err
		}
		if req.GetDropOlder() {
			p.Callbacks.Secrets = nil
		}
		if len(p.Callbacks.Secrets) >= partners.MaxCallbackSecrets {
			return fmt.Errorf("%w: partner %q has %d signing secrets, at most %d; add with drop_older", errTooManySecrets, id, len(p.Callbacks.Secrets), partners.MaxCallbackSecrets)
		}
		p.Callbacks.Secrets = append([]string{secret}, p.Callbacks.Secrets...)
		return nil
	})
	if errors.Is(err, errTooManySecrets) {
		return nil, status.Error(codes.FailedPrecondition, err.Error())
	}
	if err != nil {
		return nil, partnerStatus(err)
	}
	s.cfg.Log.Info("admin: partner callback signing secret added", "partner", id, "secrets", len(out.Callbacks.Secrets),
		"dropped_older", req.GetDropOlder(), "registry_version", version)
	return &adminproto.AddCallbackSecretResponse{Partner: partnerToProto(out), Secret: secret, RegistryVersion: version}, nil
}

var errTooManySecrets = errors.New("too many signing secrets")

// eachCell calls fn for every cell of the table at once, each bounded by
// cellCallTimeout, and returns the cells' reports in the table's order.
func (s *Server) eachCell(ctx context.Context, fn func(ctx context.Context, c cellproto.CellClient, rep *adminproto.CellCallbacks) error) ([]*adminproto.CellCallbacks, error) {
	var reps []*adminproto.CellCallbacks
	errs, err := s.forCells(ctx, func(ids []string) {
		reps = make([]*adminproto.CellCallbacks, len(ids))
		for i, id := range ids {
			reps[i] = &adminproto.CellCallbacks{CellId: id}
		}
	}, func(ctx context.Context, i int, c cellproto.CellClient) error { return fn(ctx, c, reps[i]) })
	for i, e := range errs {
		if e != nil {
			reps[i].Error = status.Convert(e).Message()
		}
	}
	return reps, err
}

// forCells calls fn for every cell of the table at once, each bounded by
// cellCallTimeout, once start has been told their IDs (i is a cell's
// place among them); it returns each cell's error (reaching it, or fn's),
// in the table's order.
func (s *Server) forCells(ctx context.Context, start func(ids []string), fn func(ctx context.Context, i int, c cellproto.CellClient) error) ([]error, error) {
	if s.cfg.Cells == nil {
		return nil, status.Error(codes.Unimplemented, "this replica reaches no cells")
	}
	tbl := s.cfg.State.Table()
	if tbl == nil {
		return nil, errNoTable()
	}
	cells := tbl.Spec().Cells
	ids := make([]string, len(cells))
	for i, c := range cells {
		ids[i] = c.ID
	}
	start(ids)
	errs := make([]error, len(cells))
	var wg sync.WaitGroup
	for i, c := range cells {
		wg.Go(func() {
			cctx, cancel := context.WithTimeout(ctx, cellCallTimeout)
			defer cancel()
			client, err := s.cfg.Cells.Client(&c, tbl.Balancer(c.Pool))
			if err == nil {
				err = fn(cctx, i, client)
			}
			errs[i] = err
		})
	}
	wg.Wait()
	return errs, nil
}

// FindTransaction asks every cell what it holds of a partner's
// transaction; see the Admin service's contract.
func (s *Server) FindTransaction(ctx context.Context, req *adminproto.FindTransactionRequest) (*adminproto.FindTransactionResponse, error) {
	if err := checkPartnerID(req.GetPartnerId()); err != nil {
		return nil, err
	}
	if err := idempotency.ValidateKey(req.GetTransactionId()); err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "transaction_id: %v", err)
	}
	out := &adminproto.FindTransactionResponse{PartnerId: req.GetPartnerId(), TransactionId: req.GetTransactionId()}
	in := &cellproto.GetRequest{PartnerId: req.GetPartnerId(), TransactionId: req.GetTransactionId()}
	errs, err := s.forCells(ctx, func(ids []string) {
		out.Cells = make([]*adminproto.CellTransaction, len(ids))
		for i, id := range ids {
			out.Cells[i] = &adminproto.CellTransaction{CellId: id}
		}
	}, func(ctx context.Context, i int, c cellproto.CellClient) error {
		rec, err := c.Inspect(ctx, in)
		out.Cells[i].Record = rec
		return err
	})
	if err != nil {
		return nil, err
	}
	for i, e := range errs {
		if e != nil {
			out.Cells[i].Error = status.Convert(e).Message()
		}
	}
	return out, nil
}

func (s *Server) ListCallbacks(ctx context.Context, req *cellproto.ListCallbacksRequest) (*adminproto.ListCallbacksResponse, error) {
	var mu sync.Mutex
	var events []*cellproto.CallbackEvent
	reps, err := s.eachCell(ctx, func(ctx context.Context, c cellproto.CellClient, rep *adminproto.CellCallbacks) error {
		resp, err := c.ListCallbacks(ctx, req)
		if err != nil {
			return err
		}
		rep.RegistryVersion, rep.Pending, rep.Dead = resp.GetRegistryVersion(), resp.GetPending(), resp.GetDead()
		mu.Lock()
		events = append(events, resp.GetEvents()...)
		mu.Unlock()
		return nil
	})
	if err != nil {
		return nil, err
	}
	sort.SliceStable(events, func(i, j int) bool {
		return events[i].GetCreatedAt().AsTime().Before(events[j].GetCreatedAt().AsTime())
	})
	return &adminproto.ListCallbacksResponse{Events: events, Cells: reps}, nil
}

func (s *Server) ReplayCallbacks(ctx context.Context, req *cellproto.ReplayCallbacksRequest) (*adminproto.ReplayCallbacksResponse, error) {
	if err := checkPartnerID(req.GetPartnerId()); err != nil {
		return nil, err
	}
	var mu sync.Mutex
	var total int64
	reps, err := s.eachCell(ctx, func(ctx context.Context, c cellproto.CellClient, rep *adminproto.CellCallbacks) error {
		resp, err := c.ReplayCallbacks(ctx, req)
		if err != nil {
			return err
		}
		mu.Lock()
		total += resp.GetReplayed()
		mu.Unlock()
		return nil
	})
	if err != nil {
		return nil, err
	}
	s.cfg.Log.Info("admin: callbacks replayed", "partner", req.GetPartnerId(), "event_id", req.GetEventId(), "replayed", total)
	return &adminproto.ReplayCallbacksResponse{Replayed: total, Cells: reps}, nil
}
