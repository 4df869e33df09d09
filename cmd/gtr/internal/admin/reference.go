package admin

import (
	"context"
	"encoding/hex"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/cellpay/cellpay/pkg/adminproto"
)

// References finds the refusals answered under a request ID on every GTR
// replica that answers (package replicas), and names those replicas.
type References func(ctx context.Context, requestID string) (found []*adminproto.Refusal, replicas []string, err error)

// FindReference finds a partner's call by the reference quoted from its
// error; see the Admin service's contract.
func (s *Server) FindReference(ctx context.Context, req *adminproto.FindReferenceRequest) (*adminproto.FindReferenceResponse, error) {
	id := req.GetRequestId()
	if _, err := hex.DecodeString(id); err != nil || len(id) != 16 {
		return nil, status.Error(codes.InvalidArgument, "request_id: want the 16 hexadecimal digits of a reference, e.g. 6553324a6b46f7af")
	}
	if s.cfg.References == nil {
		return nil, status.Error(codes.Unimplemented, "this GTR keeps no refusals")
	}
	found, replicas, err := s.cfg.References(ctx, id)
	if err != nil {
		return nil, status.Errorf(codes.Unavailable, "searching the replicas: %v", err)
	}
	if len(found) == 0 {
		return nil, status.Errorf(codes.NotFound, "no refusal under reference %s on replicas %v (each keeps its last 4,096)", id, replicas)
	}
	return &adminproto.FindReferenceResponse{Refusals: found, Replicas: replicas}, nil
}
