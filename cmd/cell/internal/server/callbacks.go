package server

import (
	"context"
	"errors"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/cellpay/cellpay/cmd/cell/internal/store"
	"github.com/cellpay/cellpay/pkg/cellproto"
	"github.com/cellpay/cellpay/pkg/idempotency"
)

// Outbox is the cell's callback outbox as operators reach it through the
// GTR; *store.Store implements it, with the contracts documented there.
type Outbox interface {
	ListCallbacks(ctx context.Context, f store.CallbackFilter) ([]store.Callback, error)
	ReplayCallbacks(ctx context.Context, partnerID, eventID string, since, now time.Time) (int64, error)
	CallbackBacklog(ctx context.Context) (store.Backlog, error)
}

var callbackStatuses = map[string]bool{store.CallbackPending: true, store.CallbackDelivered: true, store.CallbackDead: true}

// ListCallbacks lists the outbox; see the Cell service's contract.
func (s *Server) ListCallbacks(ctx context.Context, req *cellproto.ListCallbacksRequest) (*cellproto.ListCallbacksResponse, error) {
	if s.cfg.Outbox == nil {
		return nil, status.Error(codes.Unimplemented, "this cell has no callback outbox")
	}
	if p := req.GetPartnerId(); p != "" {
		if err := idempotency.ValidateKey(p); err != nil {
			return nil, status.Errorf(codes.InvalidArgument, "partner_id: %v", err)
		}
	}
	if id := req.GetTransactionId(); id != "" {
		if err := idempotency.ValidateKey(id); err != nil || req.GetPartnerId() == "" {
			return nil, status.Error(codes.InvalidArgument, "transaction_id: a valid ID, with partner_id")
		}
	}
	for _, st := range req.GetStatuses() {
		if !callbackStatuses[st] {
			return nil, status.Error(codes.InvalidArgument, "statuses: want pending, delivered or dead")
		}
	}
	f := store.CallbackFilter{PartnerID: req.GetPartnerId(), Statuses: req.GetStatuses(), Failed: req.GetFailed(), Limit: int(req.GetLimit()),
		TransactionID: req.GetTransactionId()}
	if req.GetSince() != nil {
		f.Since = req.GetSince().AsTime()
	}
	rows, err := s.cfg.Outbox.ListCallbacks(ctx, f)
	if err != nil {
		return nil, status.Error(codes.Unavailable, err.Error())
	}
	b, err := s.cfg.Outbox.CallbackBacklog(ctx)
	if err != nil {
		return nil, status.Error(codes.Unavailable, err.Error())
	}
	resp := &cellproto.ListCallbacksResponse{Pending: b.Pending, Dead: b.Dead}
	if s.cfg.RegistryVersion != nil {
		resp.RegistryVersion = s.cfg.RegistryVersion()
	}
	for _, c := range rows {
		resp.Events = append(resp.Events, s.callbackEvent(c))
	}
	return resp, nil
}

func (s *Server) callbackEvent(c store.Callback) *cellproto.CallbackEvent {
	ev := &cellproto.CallbackEvent{EventId: c.EventID, PartnerId: c.PartnerID, TransactionId: c.TransactionID, Status: c.Status,
		Attempts: int32(c.Attempts), NextAttemptAt: timestamppb.New(c.NextAttemptAt), LastError: c.LastError,
		LastHttpStatus: int32(c.LastHTTPStatus), LastEndpoint: c.LastEndpoint, DeliveredTo: c.DeliveredTo,
		CreatedAt: timestamppb.New(c.CreatedAt), CellId: s.cfg.CellID}
	if !c.DeliveredAt.IsZero() {
		ev.DeliveredAt = timestamppb.New(c.DeliveredAt)
	}
	return ev
}

// Inspect is an operator's view of one transaction in this cell; see the
// Cell service's contract.
func (s *Server) Inspect(ctx context.Context, req *cellproto.GetRequest) (*cellproto.InspectResponse, error) {
	k := idempotency.Key{PartnerID: req.GetPartnerId(), TransactionID: req.GetTransactionId()}
	if err := idempotency.ValidateKey(k.PartnerID); err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "partner_id: %v", err)
	}
	if err := idempotency.ValidateKey(k.TransactionID); err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "transaction_id: %v", err)
	}
	r, err := s.cfg.Store.Get(ctx, k)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return &cellproto.InspectResponse{}, nil
	case err != nil:
		return nil, status.Error(codes.Unavailable, err.Error())
	}
	resp := &cellproto.InspectResponse{Found: true, State: string(r.State), Attempt: r.Attempt, CellId: r.CellID, RouteRule: r.RouteRule,
		DeclineReason: r.DeclineReason, AuthCode: r.AuthCode, MaskedPan: r.MaskedPAN, AmountMinorUnits: r.Amount, Currency: r.Currency,
		PaymentType: r.PaymentType.String(), CreatedAt: timestamppb.New(r.CreatedAt), UpdatedAt: timestamppb.New(r.UpdatedAt), Unfiled: r.Unfiled}
	if s.cfg.Outbox != nil {
		rows, err := s.cfg.Outbox.ListCallbacks(ctx, store.CallbackFilter{PartnerID: k.PartnerID, TransactionID: k.TransactionID, Limit: 100})
		if err != nil {
			return nil, status.Error(codes.Unavailable, err.Error())
		}
		for _, c := range rows {
			resp.Callbacks = append(resp.Callbacks, s.callbackEvent(c))
		}
	}
	return resp, nil
}

// ReplayCallbacks replays a partner's events; see the Cell service's
// contract.
func (s *Server) ReplayCallbacks(ctx context.Context, req *cellproto.ReplayCallbacksRequest) (*cellproto.ReplayCallbacksResponse, error) {
	if s.cfg.Outbox == nil {
		return nil, status.Error(codes.Unimplemented, "this cell has no callback outbox")
	}
	if err := idempotency.ValidateKey(req.GetPartnerId()); err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "partner_id: %v", err)
	}
	var since time.Time
	if req.GetSince() != nil {
		since = req.GetSince().AsTime()
	}
	n, err := s.cfg.Outbox.ReplayCallbacks(ctx, req.GetPartnerId(), req.GetEventId(), since, s.cfg.Now())
	if err != nil {
		return nil, status.Error(codes.Unavailable, err.Error())
	}
	s.cfg.Log.Info("callbacks replayed", "partner_id", req.GetPartnerId(), "event_id", req.GetEventId(), "since", since, "replayed", n)
	return &cellproto.ReplayCallbacksResponse{Replayed: n}, nil
}
