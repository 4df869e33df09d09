// Package rest serves cellpay.v1.Payments to partners as REST/JSON over
// HTTPS, from the same protos as gRPC (grpc-gateway; the HTTP rules are
// proto/cellpay/v1/payments_http.yaml) and through the same gRPC server's
// tap and interceptors (an in-process connection, no network), so that a
// call over JSON is authenticated, admitted, limited, validated, routed and
// answered exactly as over gRPC. What is REST's own:
//
//   - JSON field names are the protos' (transaction_id); unknown fields
//     are refused, naming them.
//   - An Idempotency-Key header means the transaction_id: it fills an
//     absent one, and one that differs, or is not printable ASCII, is
//     refused (INVALID_REQUEST).
//   - A call to /v1/ is authenticated from its headers (Authenticate)
//     before its body is read, as the gRPC server's tap does before it
//     decodes anything; then bodies over MaxBody are refused before
//     decoding (413, REQUEST_TOO_LARGE).
//   - A refusal is the HTTP status of its gRPC code and a body of
//     google.rpc.Status in JSON ({"code", "message", "details"}), its
//     details holding the google.rpc.ErrorInfo (reason, request_id) and,
//     for a limit, the RetryInfo also sent as Retry-After (seconds).
//   - Every answer carries X-Request-Id.
//   - GET /openapi.json is the API's OpenAPI document, the one committed
//     in api/openapi.
package rest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/cellpay/cellpay/api/openapi"
	"github.com/cellpay/cellpay/internal/card"
	"github.com/cellpay/cellpay/pkg/api/apierr"
	"github.com/cellpay/cellpay/pkg/api/cellpayv1"
)

// IdempotencyKey is the header that may carry the transaction_id.
const IdempotencyKey = "Idempotency-Key"

// idempotencyMD is IdempotencyKey as the in-process call's metadata.
const idempotencyMD = "idempotency-key"

// Config configures the handler.
type Config struct {
	// Conn reaches the partners' gRPC server in process (its tap and
	// interceptors included); Interceptor must be among its dial options.
	Conn grpc.ClientConnInterface
	// MaxBody bounds a request's body, in bytes; default 64 KiB, the
	// partners' gRPC message limit.
	MaxBody int64
	// Authenticate, if set, refuses a /v1/ call from its headers before
	// its body is read, with a status error (the tap's authentication:
	// auth.Partners.FromHeader); the gRPC server authenticates it again.
	Authenticate func(http.Header) error
	// LogRefusal, if set, logs a refusal made here (authentication, the
	// body, the path) under its request ID; the GTR passes the bounded
	// log of the tap's refusals (admission.Partners.LogRefusal), since
	// these come before any limit. A refusal by the gRPC server is logged
	// there.
	LogRefusal func(id, method, partner string, st *status.Status)
}

// Marshaler is the JSON of the REST API: the protos' field names, enums by
// name, unpopulated fields left out, unknown fields refused.
var Marshaler = &runtime.JSONPb{
	MarshalOptions:   protojson.MarshalOptions{UseProtoNames: true},
	UnmarshalOptions: protojson.UnmarshalOptions{DiscardUnknown: false},
}

// Handler returns the REST API's handler.
func Handler(ctx context.Context, cfg Config) (http.Handler, error) {
	if cfg.Conn == nil {
		return nil, errors.New("rest: Conn is required")
	}
	if cfg.MaxBody <= 0 {
		cfg.MaxBody = 64 << 10
	}
	eh := errorHandler(cfg.LogRefusal)
	mux := runtime.NewServeMux(
		runtime.WithMarshalerOption(runtime.MIMEWildcard, Marshaler),
		runtime.WithIncomingHeaderMatcher(incoming),
		runtime.WithOutgoingHeaderMatcher(outgoing),
		runtime.WithOutgoingTrailerMatcher(func(string) (string, bool) { return "", false }),
		runtime.WithErrorHandler(eh),
		runtime.WithRoutingErrorHandler(func(ctx context.Context, mux *runtime.ServeMux, m runtime.Marshaler, w http.ResponseWriter, r *http.Request, code int) {
			msg := "no such operation: " + r.Method + " " + r.URL.Path
			if code == http.StatusMethodNotAllowed {
				msg = "method " + r.Method + " not allowed on " + r.URL.Path
			}
			eh(ctx, mux, m, w, r, &runtime.HTTPStatusError{HTTPStatus: code, Err: apierr.Error(codes.Unimplemented, apierr.NotSupported, msg)})
		}),
	)
	if err := cellpayv1.RegisterPaymentsHandlerClient(ctx, mux, cellpayv1.NewPaymentsClient(cfg.Conn)); err != nil {
		return nil, fmt.Errorf("rest: %w", err)
	}
	if err := mux.HandlePath(http.MethodGet, "/openapi.json", func(w http.ResponseWriter, _ *http.Request, _ map[string]string) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(openapi.V1)
	}); err != nil {
		return nil, fmt.Errorf("rest: %w", err)
	}
	return front(mux, cfg, eh), nil
}

// front authenticates a /v1/ call from its headers, then reads its body
// whole, up to cfg.MaxBody bytes, before mux decodes it, refusing a larger
// one with REQUEST_TOO_LARGE.
func front(mux *runtime.ServeMux, cfg Config, eh runtime.ErrorHandlerFunc) http.Handler {
	max := cfg.MaxBody
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if cfg.Authenticate != nil && strings.HasPrefix(r.URL.Path, "/v1/") {
			if err := cfg.Authenticate(r.Header); err != nil {
				eh(r.Context(), mux, Marshaler, w, r, err)
				return
			}
		}
		if err := idempotencyHeader(r.Header); err != nil {
			eh(r.Context(), mux, Marshaler, w, r, &runtime.HTTPStatusError{HTTPStatus: http.StatusBadRequest, Err: err})
			return
		}
		if r.Body != nil && r.Body != http.NoBody {
			b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, max))
			if err != nil {
				httpStatus, refusal := http.StatusBadRequest, apierr.Error(codes.InvalidArgument, apierr.InvalidRequest, "body: could not be read")
				if mb := (*http.MaxBytesError)(nil); errors.As(err, &mb) {
					httpStatus, refusal = http.StatusRequestEntityTooLarge,
						apierr.Error(codes.ResourceExhausted, apierr.RequestTooLarge, fmt.Sprintf("body: over the limit of %d bytes", max))
				}
				eh(r.Context(), mux, Marshaler, w, r, &runtime.HTTPStatusError{HTTPStatus: httpStatus, Err: refusal})
				return
			}
			r.Body = io.NopCloser(bytes.NewReader(b))
		}
		mux.ServeHTTP(w, r)
	})
}

// idempotencyHeader refuses an Idempotency-Key that is not printable
// ASCII: the gateway would drop it from the call's metadata without a
// word, and a key that silently vanished would let the body's
// transaction_id (or none) stand for it.
func idempotencyHeader(h http.Header) error {
	for _, v := range h.Values(IdempotencyKey) {
		for i := 0; i < len(v); i++ {
			if v[i] < 0x20 || v[i] > 0x7e {
				return badRequest(IdempotencyKey, "must be printable ASCII, a transaction_id")
			}
		}
	}
	return nil
}

// incoming forwards the one header of REST's own to the call's metadata;
// the gateway forwards Authorization itself.
func incoming(key string) (string, bool) {
	if http.CanonicalHeaderKey(key) == IdempotencyKey {
		return idempotencyMD, true
	}
	return "", false
}

// outgoing sends the request ID's header, and no other metadata.
func outgoing(key string) (string, bool) {
	if key == apierr.HeaderRequestID {
		return "X-Request-Id", true
	}
	return "", false
}

// Interceptor is the in-process connection's: it applies the
// Idempotency-Key header to a call that makes a transaction (a submit, a
// capture, a void, a refund: the key is the new transaction's ID).
func Interceptor(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	var id *string
	switch r := req.(type) {
	case *cellpayv1.SubmitTransactionRequest:
		id = &r.TransactionId
	case *cellpayv1.CaptureTransactionRequest:
		id = &r.TransactionId
	case *cellpayv1.VoidTransactionRequest:
		id = &r.TransactionId
	case *cellpayv1.RefundTransactionRequest:
		id = &r.TransactionId
	}
	if keys := metadata.ValueFromOutgoingContext(ctx, idempotencyMD); id != nil && len(keys) > 0 {
		switch key := keys[0]; {
		case len(keys) > 1:
			return badRequest(IdempotencyKey, "sent more than once")
		case *id == "":
			*id = key
		case *id != key:
			return badRequest(IdempotencyKey, "differs from transaction_id; send one, or both the same")
		}
	}
	return invoker(ctx, method, req, reply, cc, opts...)
}

func badRequest(field, why string) error {
	st := apierr.New(codes.InvalidArgument, apierr.InvalidRequest, field+": "+why)
	if d, err := st.WithDetails(&errdetails.BadRequest{FieldViolations: []*errdetails.BadRequest_FieldViolation{{Field: field, Description: why}}}); err == nil {
		st = d
	}
	return st.Err()
}

// errorHandler answers a refusal: a refusal made here or by the gateway
// (the body, the path) gets its request ID here, and is logged; one the
// gRPC server made has its own already. Retry-After and X-Request-Id
// repeat what the status says.
func errorHandler(logRefusal func(id, method, partner string, st *status.Status)) runtime.ErrorHandlerFunc {
	return func(ctx context.Context, mux *runtime.ServeMux, m runtime.Marshaler, w http.ResponseWriter, r *http.Request, err error) {
		var hse *runtime.HTTPStatusError
		httpStatus := 0
		if errors.As(err, &hse) {
			httpStatus, err = hse.HTTPStatus, hse.Err
		}
		st := status.Convert(err)
		// The decoder quotes what it could not read (a PAN in a number,
		// or as a field's name): masked, as card data never leaves in an
		// error; and JSON carries UTF-8 only (a path's bytes quoted, say).
		if m := card.MaskIn(strings.ToValidUTF8(st.Message(), "\uFFFD")); m != st.Message() {
			p := st.Proto()
			p.Message = m
			st = status.FromProto(p)
		}
		id := apierr.RequestIDOf(err)
		if id == "" {
			id = apierr.NewRequestID()
			st = apierr.WithRequestID(st, id)
			if logRefusal != nil {
				logRefusal(id, r.Method+" "+card.MaskIn(strings.ToValidUTF8(r.URL.Path, "\uFFFD")), "", st)
			}
		}
		w.Header().Set("X-Request-Id", id)
		if md, ok := runtime.ServerMetadataFromContext(ctx); ok {
			md.HeaderMD.Delete(apierr.HeaderRequestID) // set just above: not forwarded a second time
		}
		for _, d := range st.Details() {
			if ri, ok := d.(*errdetails.RetryInfo); ok {
				secs := math.Ceil(ri.GetRetryDelay().AsDuration().Seconds())
				w.Header().Set("Retry-After", strconv.Itoa(max(1, int(secs))))
			}
		}
		err = st.Err()
		if httpStatus != 0 {
			err = &runtime.HTTPStatusError{HTTPStatus: httpStatus, Err: err}
		}
		runtime.DefaultHTTPErrorHandler(ctx, mux, m, w, r, err)
	}
}
