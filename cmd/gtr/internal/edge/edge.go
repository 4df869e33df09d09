// Package edge shapes what partners see of the GTR's own failures. An error
// about the request itself (a field, a conflict, authentication, a limit)
// is passed as it is; an error about the platform (a cell unreachable, a
// deadline, an internal fault) reaches the partner as a generic message
// with a reference they can quote, and its details (cell IDs, transport
// and database errors) go to the log under the same reference.
package edge

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Generic messages by code. They say what a partner may do.
var generic = map[codes.Code]string{
	codes.Unavailable:      "the platform could not take the transaction now; retry it unchanged, under the same transaction_id",
	codes.DeadlineExceeded: "the deadline passed before the outcome was known; read it with GetTransaction, or retry unchanged under the same transaction_id",
	codes.Internal:         "internal error",
	codes.Unknown:          "internal error",
	codes.DataLoss:         "internal error",
	codes.Aborted:          "a concurrent request for the same transaction is in progress; retry it unchanged shortly",
}

// UnaryInterceptor rewrites platform errors of calls whose method starts
// with prefix, logging the original under a reference.
func UnaryInterceptor(prefix string, log *slog.Logger) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		resp, err := handler(ctx, req)
		if err == nil || !strings.HasPrefix(info.FullMethod, prefix) {
			return resp, err
		}
		st := status.Convert(err)
		msg, ok := generic[st.Code()]
		if !ok {
			return resp, err
		}
		ref := reference()
		log.Warn("partner answered with a platform error", "ref", ref, "method", info.FullMethod, "code", st.Code().String(), "detail", st.Message())
		return nil, status.Errorf(st.Code(), "%s (reference %s)", msg, ref)
	}
}

func reference() string {
	var b [6]byte
	_, _ = rand.Read(b[:]) // crypto/rand does not fail
	return hex.EncodeToString(b[:])
}
