package admin

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/cellpay/cellpay/internal/certsig"
	"github.com/cellpay/cellpay/internal/drillreport"
	"github.com/cellpay/cellpay/pkg/adminproto"
)

// DrillStore keeps the drills' signed reports, each under its ID.
// *DrillBucket (the cellpay_drills JetStream bucket) implements it.
type DrillStore interface {
	// Create keeps value under key unless key holds a value already, and
	// reports whether it did: keeping the same report twice changes
	// nothing.
	Create(ctx context.Context, key string, value []byte) (created bool, err error)
	// Get is key's value, or ErrNoDrill.
	Get(ctx context.Context, key string) ([]byte, error)
	// All is every value kept, in no order; at most MaxDrillsRead.
	All(ctx context.Context) ([][]byte, error)
}

// ErrNoDrill: no drill is kept under that ID.
var ErrNoDrill = errors.New("admin: no such drill")

// Limits of the drills' RPCs and their bucket.
const (
	defDrillLimit = 20
	maxDrillLimit = 100
	// MaxDrillsRead bounds the values ListDrills reads: the bucket's
	// size (DrillBucketMaxBytes) keeps fewer than that of any real drill.
	MaxDrillsRead = 4096
	// maxKeptDrill bounds a kept value: a signed report at its bounds,
	// base64 in JSON, and who recorded it.
	maxKeptDrill = 128 << 10
)

// drillIDPattern is a drill's ID (drillreport.ID).
var drillIDPattern = regexp.MustCompile(`^[0-9a-f]{16}$`)

// keptDrill is a drill's value in the bucket: the signed report and who
// recorded it.
type keptDrill struct {
	drillreport.Signed
	RecordedAt time.Time `json:"recorded_at"`
	RecordedBy string    `json:"recorded_by,omitempty"`
	Replica    string    `json:"replica,omitempty"`
}

// decodeKeptDrill reads a value of the bucket, bounded. What it returns is
// not verified.
func decodeKeptDrill(b []byte) (keptDrill, error) {
	var k keptDrill
	if len(b) > maxKeptDrill {
		return k, fmt.Errorf("admin: a kept drill of %d bytes, at most %d", len(b), maxKeptDrill)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(&k); err != nil {
		return keptDrill{}, fmt.Errorf("admin: a kept drill: %w", err)
	}
	if dec.More() {
		return keptDrill{}, errors.New("admin: a kept drill: bytes after its value")
	}
	return k, nil
}

// drillsReady is the error of a drill RPC on a GTR that keeps none.
func (s *Server) drillsReady() error {
	if s.cfg.Drills == nil || s.cfg.DrillRoots == nil {
		return status.Error(codes.Unavailable, "drills: this GTR keeps no drills (it runs without NATS, or without the platform's CA)")
	}
	return nil
}

// RecordDrill verifies a drill's signed report and keeps it.
func (s *Server) RecordDrill(ctx context.Context, req *adminproto.RecordDrillRequest) (*adminproto.RecordDrillResponse, error) {
	if err := s.drillsReady(); err != nil {
		return nil, err
	}
	signed := signedFromProto(req.GetReport())
	v, err := drillreport.Verify(signed, s.cfg.DrillRoots, time.Now())
	if err != nil {
		return nil, drillError(err)
	}
	op, _ := OperatorFrom(ctx)
	b, err := json.Marshal(keptDrill{Signed: signed, RecordedAt: time.Now().UTC(), RecordedBy: op.ID, Replica: s.cfg.ReplicaID})
	if err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	created, err := s.cfg.Drills.Create(ctx, v.ID, b)
	if err != nil {
		return nil, status.Errorf(codes.Unavailable, "drills: %v", err)
	}
	if created {
		s.cfg.Log.Info("drill report kept", "id", v.ID, "passed", v.Document.Summary.Passed, "signer", v.Signer)
	}
	return &adminproto.RecordDrillResponse{Id: v.ID, Created: created, Summary: summaryToProto(v)}, nil
}

// drillError is a report's refusal: a bound or an unreadable part is
// INVALID_ARGUMENT, a certificate not trusted or not the operators'
// PERMISSION_DENIED; each names the field.
func drillError(err error) error {
	var fe *drillreport.FieldError
	switch {
	case errors.As(err, &fe):
		return fieldError("report."+fe.Field, fe.Reason)
	case errors.Is(err, certsig.ErrChain), errors.Is(err, certsig.ErrIdentity):
		return status.Errorf(codes.PermissionDenied, "report.%v", err)
	}
	return status.Errorf(codes.InvalidArgument, "report.%v", err)
}

// ListDrills lists the drills kept, newest first.
func (s *Server) ListDrills(ctx context.Context, req *adminproto.ListDrillsRequest) (*adminproto.ListDrillsResponse, error) {
	limit := int(req.GetLimit())
	switch {
	case limit < 0 || limit > maxDrillLimit:
		return nil, fieldError("limit", fmt.Sprintf("want 0 (the default, %d) to %d", defDrillLimit, maxDrillLimit))
	case limit == 0:
		limit = defDrillLimit
	}
	if err := s.drillsReady(); err != nil {
		return nil, err
	}
	values, err := s.cfg.Drills.All(ctx)
	if err != nil {
		return nil, status.Errorf(codes.Unavailable, "drills: %v", err)
	}
	recs := make([]*adminproto.DrillRecord, 0, len(values))
	for _, b := range values {
		if r := s.drillRecord(b); r != nil {
			recs = append(recs, r)
		}
	}
	slices.SortFunc(recs, func(a, b *adminproto.DrillRecord) int {
		return cmp.Or(b.GetSummary().GetStart().AsTime().Compare(a.GetSummary().GetStart().AsTime()),
			cmp.Compare(a.GetSummary().GetId(), b.GetSummary().GetId()))
	})
	return &adminproto.ListDrillsResponse{Drills: recs[:min(limit, len(recs))]}, nil
}

// GetDrill is one drill kept.
func (s *Server) GetDrill(ctx context.Context, req *adminproto.GetDrillRequest) (*adminproto.DrillRecord, error) {
	if !drillIDPattern.MatchString(req.GetId()) {
		return nil, fieldError("id", "want a drill's ID: 16 hexadecimal digits, lower case")
	}
	if err := s.drillsReady(); err != nil {
		return nil, err
	}
	b, err := s.cfg.Drills.Get(ctx, req.GetId())
	if errors.Is(err, ErrNoDrill) {
		return nil, status.Errorf(codes.NotFound, "drill %s: none is kept", req.GetId())
	} else if err != nil {
		return nil, status.Errorf(codes.Unavailable, "drills: %v", err)
	}
	r := s.drillRecord(b)
	if r == nil {
		return nil, status.Errorf(codes.DataLoss, "drill %s: its value in the bucket is unreadable", req.GetId())
	}
	return r, nil
}

// drillRecord is a kept value as the API shows it: verified again (as of
// its certificate's start: it was verified as of its recording), its
// summary read from the report. One that no longer verifies (written to
// the bucket by something other than a GTR) is shown with its ID alone,
// for the client's own verification to say why; an unreadable one is
// left out (nil), and logged.
func (s *Server) drillRecord(b []byte) *adminproto.DrillRecord {
	k, err := decodeKeptDrill(b)
	if err != nil {
		s.cfg.Log.Warn("drills: a value of the bucket is unreadable", "err", err)
		return nil
	}
	r := &adminproto.DrillRecord{Report: signedToProto(k.Signed), RecordedBy: k.RecordedBy, Replica: k.Replica}
	if !k.RecordedAt.IsZero() {
		r.RecordedAt = timestamppb.New(k.RecordedAt)
	}
	v, err := drillreport.Verify(k.Signed, s.cfg.DrillRoots, time.Time{})
	if err != nil {
		s.cfg.Log.Warn("drills: a report kept does not verify", "id", drillreport.ID(k.Report), "err", err)
		r.Summary = &adminproto.DrillSummary{Id: drillreport.ID(k.Report)}
		return r
	}
	r.Summary = summaryToProto(v)
	return r
}

func signedFromProto(p *adminproto.SignedDrillReport) drillreport.Signed {
	return drillreport.Signed{Report: p.GetReport(), Signature: p.GetSignature(), Certificate: p.GetCertificate()}
}

func signedToProto(s drillreport.Signed) *adminproto.SignedDrillReport {
	return &adminproto.SignedDrillReport{Report: s.Report, Signature: s.Signature, Certificate: s.Certificate}
}

// summaryToProto is a verified report's summary.
func summaryToProto(v drillreport.Verified) *adminproto.DrillSummary {
	sum := v.Document.Summary
	p := &adminproto.DrillSummary{Id: v.ID, Start: timestamppb.New(sum.Start), Passed: sum.Passed, Failed: int32(sum.Failed),
		Sent: sum.Sent, Signer: v.Signer, SignerCert: v.CertID}
	if !sum.End.IsZero() {
		p.End = timestamppb.New(sum.End)
	}
	for _, c := range sum.Cuts {
		p.Cuts = append(p.Cuts, &adminproto.DrillCut{Target: c.Target, RtoSeconds: c.RTO, LongestSeconds: c.Longest, Errors: int32(c.Errors)})
	}
	if len(sum.PartnerErrors) > 0 {
		p.PartnerErrors = map[string]int32{}
		for code, n := range sum.PartnerErrors {
			p.PartnerErrors[code] = int32(n)
		}
	}
	if r := sum.RPO; r != nil {
		p.Checked, p.AnswersLost, p.EffectsWithoutRecord, p.Unresolved = true, int32(r.AnswersLost), int32(r.EffectsWithoutRecord), int32(r.Unresolved)
	}
	return p
}

// drillRequestJSON is a RecordDrill request as the audit log keeps it:
// the report's ID and sizes, not its bytes (its own record is the
// bucket's).
func drillRequestJSON(r *adminproto.RecordDrillRequest) json.RawMessage {
	sr := r.GetReport()
	b, _ := json.Marshal(map[string]any{"id": drillreport.ID(sr.GetReport()), "report_bytes": len(sr.GetReport()),
		"signature_bytes": len(sr.GetSignature()), "certificate_bytes": len(sr.GetCertificate())})
	return b
}
