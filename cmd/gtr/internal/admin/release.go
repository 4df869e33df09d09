package admin

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/cellpay/cellpay/pkg/adminproto"
)

// Releaser writes the transaction directory's release records
// (docs/design/transaction-directory.md, "A cell lost for good").
type Releaser interface {
	// Release writes record as cell's release record and returns its
	// revision in the directory's stream.
	Release(ctx context.Context, cell string, record []byte) (uint64, error)
}

// cellIDPattern is what a cell ID may be in a directory key: a NATS
// subject token of the characters cell IDs use.
var cellIDPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$`)

// maxReason bounds a release's reason.
const maxReason = 512

// releaseRecord is a release record's value: what the audit log says too.
type releaseRecord struct {
	Cell     string    `json:"cell"`
	Reason   string    `json:"reason"`
	Replica  string    `json:"replica,omitempty"`
	Released time.Time `json:"released"`
}

// ReleaseCell declares a cell lost for good: its directory entries not
// final are taken over by the next cell their transaction reaches, and
// resolved by inquiry at the issuer.
func (s *Server) ReleaseCell(ctx context.Context, req *adminproto.ReleaseCellRequest) (*adminproto.ReleaseCellResponse, error) {
	switch {
	case s.cfg.Releaser == nil:
		return nil, status.Error(codes.Unimplemented, "release: this GTR has no transaction directory (no NATS)")
	case !cellIDPattern.MatchString(req.GetCellId()):
		return nil, status.Errorf(codes.InvalidArgument, "cell_id: %q is not a cell ID (letters, digits, - and _, at most 64)", req.GetCellId())
	case req.GetReason() == "" || len(req.GetReason()) > maxReason:
		return nil, status.Errorf(codes.InvalidArgument, "reason: required, at most %d bytes (it goes to the audit log)", maxReason)
	}
	b, err := json.Marshal(releaseRecord{Cell: req.GetCellId(), Reason: req.GetReason(), Replica: s.cfg.ReplicaID, Released: time.Now().UTC()})
	if err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	rev, err := s.cfg.Releaser.Release(ctx, req.GetCellId(), b)
	if err != nil {
		return nil, status.Error(codes.Unavailable, fmt.Sprintf("release: the transaction directory: %v", err))
	}
	s.cfg.Log.Warn("cell released: its directory entries not final go to the next cell that gets their transaction, resolved by inquiry", "cell", req.GetCellId(), "revision", rev)
	return &adminproto.ReleaseCellResponse{CellId: req.GetCellId(), Revision: rev}, nil
}
