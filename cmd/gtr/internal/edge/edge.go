// Package edge shapes what partners see of every answer of
// cellpay.v1.Payments. Each call gets a request ID (apierr.NewRequestID):
// in the response header x-request-id, on the call's span
// (cellpay.request_id) and, for a refusal, in the log and in the
// google.rpc.ErrorInfo every refusal carries (package apierr: the reason a
// partner's code branches on, the ID its people quote to support).
//
// An error about the request itself (a field, a conflict, authentication,
// a limit) keeps its message; an error about the platform (a cell
// unreachable, a deadline, an internal fault) reaches the partner as a
// generic message naming the request ID, and its details (cell IDs,
// transport and database errors) go to the log under the same ID.
package edge

import (
	"context"
	"log/slog"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/cellpay/cellpay/cmd/gtr/internal/refusals"
	"github.com/cellpay/cellpay/pkg/api/apierr"
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

// UnaryInterceptor names every call whose method starts with prefix with a
// request ID and gives its refusals their ErrorInfo; it rewrites platform
// errors, logging the original under the request ID. It runs outermost,
// so that refusals by authentication and admission are named too. served,
// if set, is told each call's method (without prefix) and how long it
// took; it must not block. keep, if set, keeps every refusal under its
// request ID with the partner and transaction it named and the status as
// it was before the platform's errors were made generic, for operators
// searching by the reference (package refusals).
func UnaryInterceptor(prefix string, log *slog.Logger, served func(method string, d time.Duration), keep *refusals.Ring) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if !strings.HasPrefix(info.FullMethod, prefix) {
			return handler(ctx, req)
		}
		id := apierr.NewRequestID()
		_ = grpc.SetHeader(ctx, metadata.Pairs(apierr.HeaderRequestID, id)) // fails only once headers are sent
		trace.SpanFromContext(ctx).SetAttributes(attribute.String(apierr.SpanAttribute, id))
		began := time.Now()
		resp, err := handler(ctx, req)
		if served != nil {
			served(info.FullMethod[len(prefix):], time.Since(began))
		}
		if err == nil {
			return resp, nil
		}
		st := status.Convert(err)
		keep.Add(id, info.FullMethod, partnerOf(req), transactionOf(req), st)
		reason := reasonOf(st)
		if msg, ok := generic[st.Code()]; ok {
			log.Warn("partner answered with a platform error", "request_id", id, "method", info.FullMethod,
				"code", st.Code().String(), "reason", reason, "detail", st.Message())
			st = apierr.New(st.Code(), reason, msg+" (reference "+id+")") // the details stay in the log
		} else {
			// Bounded by the partner's limits: the tap refuses what is
			// over them before any of this runs.
			log.Info("partner call refused", "request_id", id, "method", info.FullMethod,
				"code", st.Code().String(), "reason", reason, "detail", st.Message())
		}
		return nil, apierr.WithRequestID(st, id).Err()
	}
}

func partnerOf(req any) string {
	if r, ok := req.(interface{ GetPartnerId() string }); ok {
		return r.GetPartnerId()
	}
	return ""
}

func transactionOf(req any) string {
	if r, ok := req.(interface{ GetTransactionId() string }); ok {
		return r.GetTransactionId()
	}
	return ""
}

// reasonOf is the reason st will carry.
func reasonOf(st *status.Status) apierr.Reason {
	if r := apierr.ReasonOf(st.Err()); r != "" {
		return r
	}
	return apierr.ForCode(st.Code())
}
