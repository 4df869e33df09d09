package admin

import (
	"context"
	"errors"
	"slices"
	"strings"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/cellpay/cellpay/internal/kvsync"
	"github.com/cellpay/cellpay/internal/partners"
	"github.com/cellpay/cellpay/pkg/adminproto"
)

// PartnerStore is this replica's partner registry. *partnerstate.Store
// implements it.
type PartnerStore interface {
	// Index is the registry in force; never nil.
	Index() *partners.Index
	// Update applies fn to a copy of the registry, its version already
	// raised, then validates and stores the result with optimistic
	// concurrency; the change is in force on this replica when it returns.
	// fn may run more than once (the last run is what is stored); its
	// errors come back unchanged. Errors besides fn's:
	// kvsync.ErrUnavailable, kvsync.ErrConflict, partners.ErrInvalid.
	Update(ctx context.Context, fn func(*partners.Registry) error) error
	// Status is "connected", "disconnected" or "standalone".
	Status() string
}

// The partner RPCs make keys, and two answers (AddPartner, AddKey) carry
// one in plaintext. Neither those answers nor any request is logged: the
// audit lines below name partners and key IDs only, and no error quotes a
// key (partner and key IDs are checked for their form before they are
// quoted).

// errNoChange ends an Update whose change is already in force.
var errNoChange = errors.New("no change")

func (s *Server) ListPartners(_ context.Context, _ *adminproto.ListPartnersRequest) (*adminproto.ListPartnersResponse, error) {
	ix := s.cfg.Partners.Index()
	reg := ix.Registry()
	resp := &adminproto.ListPartnersResponse{RegistryVersion: ix.Version(), ReplicaId: s.cfg.ReplicaID, ConfigStore: s.cfg.Partners.Status()}
	for i := range reg.Partners {
		resp.Partners = append(resp.Partners, partnerToProto(&reg.Partners[i]))
	}
	return resp, nil
}

func (s *Server) AddPartner(ctx context.Context, req *adminproto.AddPartnerRequest) (*adminproto.AddPartnerResponse, error) {
	p := partners.Partner{
		ID: req.GetPartnerId(), Status: partners.StatusActive, SettlementCurrency: req.GetSettlementCurrency(),
		Markets: slices.Clone(req.GetMarkets()), PaymentTypes: slices.Clone(req.GetPaymentTypes()),
		Limits: limitsFromProto(req.GetLimits()), HomeSite: req.GetHomeSite(),
	}
	if err := p.Validate(); err != nil {
		return nil, partnerStatus(err)
	}
	plain, key, err := partners.NewKey(nil, s.cfg.State.Now())
	if err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	p.Keys = []partners.Key{key}
	var version uint64
	err = s.cfg.Partners.Update(ctx, func(r *partners.Registry) error {
		version = r.Version
		return r.Add(clonePartner(p))
	})
	if err != nil {
		return nil, partnerStatus(err)
	}
	s.cfg.Log.Info("admin: partner added", "partner", p.ID, "key_id", key.ID, "registry_version", version)
	return &adminproto.AddPartnerResponse{Partner: partnerToProto(&p), Key: newKeyToProto(plain, key), RegistryVersion: version}, nil
}

func (s *Server) SuspendPartner(ctx context.Context, req *adminproto.SuspendPartnerRequest) (*adminproto.PartnerChange, error) {
	return s.setStatus(ctx, req.GetPartnerId(), partners.StatusSuspended)
}

func (s *Server) ResumePartner(ctx context.Context, req *adminproto.ResumePartnerRequest) (*adminproto.PartnerChange, error) {
	return s.setStatus(ctx, req.GetPartnerId(), partners.StatusActive)
}

// SetPartnerHomeSite sets a partner's home site, which routing prefers.
func (s *Server) SetPartnerHomeSite(ctx context.Context, req *adminproto.SetPartnerHomeSiteRequest) (*adminproto.PartnerChange, error) {
	id := req.GetPartnerId()
	if err := checkPartnerID(id); err != nil {
		return nil, err
	}
	out, version, err := s.changePartner(ctx, id, func(r *partners.Registry) error {
		changed, err := r.SetHomeSite(id, req.GetHomeSite())
		if err == nil && !changed {
			return errNoChange
		}
		return err
	})
	if err != nil {
		return nil, partnerStatus(err)
	}
	s.cfg.Log.Info("admin: partner home site set", "partner", id, "home_site", out.HomeSite, "registry_version", version)
	return &adminproto.PartnerChange{Partner: partnerToProto(out), RegistryVersion: version}, nil
}

func (s *Server) setStatus(ctx context.Context, id, st string) (*adminproto.PartnerChange, error) {
	if err := checkPartnerID(id); err != nil {
		return nil, err
	}
	out, version, err := s.changePartner(ctx, id, func(r *partners.Registry) error {
		changed, err := r.SetStatus(id, st)
		if err == nil && !changed {
			return errNoChange
		}
		return err
	})
	if err != nil {
		return nil, partnerStatus(err)
	}
	s.cfg.Log.Info("admin: partner status set", "partner", id, "status", out.Status, "registry_version", version)
	return &adminproto.PartnerChange{Partner: partnerToProto(out), RegistryVersion: version}, nil
}

func (s *Server) AddKey(ctx context.Context, req *adminproto.AddKeyRequest) (*adminproto.AddKeyResponse, error) {
	id := req.GetPartnerId()
	if err := checkPartnerID(id); err != nil {
		return nil, err
	}
	plain, key, err := partners.NewKey(nil, s.cfg.State.Now())
	if err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	out, version, err := s.changePartner(ctx, id, func(r *partners.Registry) error { return r.AddKey(id, key) })
	if err != nil {
		return nil, partnerStatus(err)
	}
	s.cfg.Log.Info("admin: partner key added", "partner", id, "key_id", key.ID, "keys", len(out.Keys), "registry_version", version)
	return &adminproto.AddKeyResponse{Partner: partnerToProto(out), Key: newKeyToProto(plain, key), RegistryVersion: version}, nil
}

func (s *Server) RevokeKey(ctx context.Context, req *adminproto.RevokeKeyRequest) (*adminproto.PartnerChange, error) {
	id, kid := req.GetPartnerId(), req.GetKeyId()
	if err := checkPartnerID(id); err != nil {
		return nil, err
	}
	if !partners.IsKeyID(kid) {
		// Never quoted: an API key pasted here would land in errors.
		return nil, fieldError("key_id", "want the key's ID as ListPartners shows it (16 characters of a-z, 2-7), not the key")
	}
	out, version, err := s.changePartner(ctx, id, func(r *partners.Registry) error { return r.RevokeKey(id, kid, req.GetForce()) })
	if err != nil {
		return nil, partnerStatus(err)
	}
	s.cfg.Log.Info("admin: partner key revoked", "partner", id, "key_id", kid, "keys", len(out.Keys), "forced", req.GetForce(), "registry_version", version)
	return &adminproto.PartnerChange{Partner: partnerToProto(out), RegistryVersion: version}, nil
}

// changePartner runs op through the store and returns partner id as op
// left it, with the version written. When op answers errNoChange nothing
// is written, and the version is the one op was shown.
func (s *Server) changePartner(ctx context.Context, id string, op func(*partners.Registry) error) (*partners.Partner, uint64, error) {
	var out partners.Partner
	var version uint64
	err := s.cfg.Partners.Update(ctx, func(r *partners.Registry) error {
		err := op(r)
		if err != nil && !errors.Is(err, errNoChange) {
			return err
		}
		version = r.Version
		if errors.Is(err, errNoChange) {
			version--
		}
		if p, ok := r.Find(id); ok {
			out = clonePartner(*p)
		}
		return err
	})
	if errors.Is(err, errNoChange) {
		err = nil
	}
	return &out, version, err
}

func checkPartnerID(id string) error {
	if id == "" {
		return fieldError("partner_id", "is required")
	}
	if !partners.IsPartnerID(id) { // not quoted, as key_id
		return fieldError("partner_id", "want 1 to 64 characters of [A-Za-z0-9._-]")
	}
	return nil
}

func clonePartner(p partners.Partner) partners.Partner {
	r := (&partners.Registry{Partners: []partners.Partner{p}}).Clone()
	return r.Partners[0]
}

// partnerStatus maps the registry's errors to codes; a validation error
// names the request's field (a partner's "id" is partner_id).
func partnerStatus(err error) error {
	var fe *partners.FieldError
	switch {
	case errors.Is(err, partners.ErrNotFound), errors.Is(err, partners.ErrKeyNotFound):
		return status.Error(codes.NotFound, err.Error())
	case errors.Is(err, partners.ErrExists):
		return status.Error(codes.AlreadyExists, err.Error())
	case errors.Is(err, partners.ErrLastKey), errors.Is(err, partners.ErrTooManyKeys):
		return status.Error(codes.FailedPrecondition, err.Error())
	case errors.Is(err, kvsync.ErrUnavailable):
		return status.Error(codes.Unavailable, err.Error()+"; partners' calls continue on the last-known registry")
	case errors.Is(err, kvsync.ErrConflict):
		return status.Error(codes.Aborted, err.Error())
	case errors.As(err, &fe):
		field := fe.Field
		if field == "id" {
			field = "partner_id"
		}
		return badRequest(field+": "+fe.Reason, []*errdetails.BadRequest_FieldViolation{{Field: field, Description: fe.Reason}})
	case errors.Is(err, partners.ErrInvalid):
		return status.Error(codes.InvalidArgument, strings.ReplaceAll(err.Error(), "\n", "; "))
	}
	return toStatus(err)
}

// partnerToProto is what operators see of a partner: never a key's hash,
// never a callback signing secret (only how many there are).
func partnerToProto(p *partners.Partner) *adminproto.Partner {
	st := adminproto.PartnerStatus_PARTNER_STATUS_ACTIVE
	if p.Status != partners.StatusActive {
		st = adminproto.PartnerStatus_PARTNER_STATUS_SUSPENDED
	}
	out := &adminproto.Partner{
		Id: p.ID, Status: st, SettlementCurrency: p.SettlementCurrency, HomeSite: p.HomeSite,
		Markets: slices.Clone(p.Markets), PaymentTypes: slices.Clone(p.PaymentTypes),
		Limits: limitsToProto(p.Limits), EffectiveLimits: limitsToProto(p.EffectiveLimits()),
		Callbacks: &adminproto.PartnerCallbacks{
			Mode: p.Callbacks.Mode, Endpoints: slices.Clone(p.Callbacks.Endpoints), Public: p.Callbacks.Public,
			SigningSecrets: int32(len(p.Callbacks.Secrets)),
		},
	}
	for _, k := range p.Keys {
		out.Keys = append(out.Keys, &adminproto.PartnerKey{KeyId: k.ID, Created: timestamppb.New(k.Created)})
	}
	return out
}

func newKeyToProto(plain string, k partners.Key) *adminproto.NewKey {
	return &adminproto.NewKey{KeyId: k.ID, ApiKey: plain, Created: timestamppb.New(k.Created)}
}

func limitsToProto(l partners.Limits) *adminproto.PartnerLimits {
	return &adminproto.PartnerLimits{RatePerSecond: l.RatePerSecond, Burst: int32(l.Burst), MaxInFlight: int32(l.MaxInFlight)}
}

func limitsFromProto(l *adminproto.PartnerLimits) partners.Limits {
	return partners.Limits{RatePerSecond: l.GetRatePerSecond(), Burst: int(l.GetBurst()), MaxInFlight: int(l.GetMaxInFlight())}
}
