// Package apierr is what a partner's code branches on when the GTR refuses
// a call: every refusal of cellpay.v1.Payments, over gRPC or REST, carries
// a google.rpc.ErrorInfo in its status details with Domain and one Reason
// of the closed set below, and the request ID the GTR logged and traced
// the call under in its metadata (MetadataRequestID), which is what a
// partner quotes to support. docs/partners/errors.md lists the reasons
// with what each asks of the partner.
//
// The set is closed: a reason is added in a new API version, never
// renamed or removed; a client that meets one it does not know treats it
// by its gRPC code.
package apierr

import (
	"crypto/rand"
	"encoding/hex"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/anypb"
)

// Domain is the ErrorInfo domain of every Cellpay reason.
const Domain = "cellpay.dev"

// MetadataRequestID is the ErrorInfo metadata key of the call's request
// ID; HeaderRequestID is the response header (gRPC metadata or HTTP
// header) that carries it on every answer, refusals and successes alike.
const (
	MetadataRequestID = "request_id"
	HeaderRequestID   = "x-request-id"
)

// SpanAttribute is the attribute of the GTR's span of the call that holds
// its request ID.
const SpanAttribute = "cellpay.request_id"

// Reason is the machine-readable cause of a refusal.
type Reason string

// The reasons, with the gRPC code each comes with.
const (
	// APIKeyMissing (UNAUTHENTICATED): no "authorization: Bearer <key>".
	APIKeyMissing Reason = "API_KEY_MISSING"
	// APIKeyInvalid (UNAUTHENTICATED): the key is unknown or revoked.
	APIKeyInvalid Reason = "API_KEY_INVALID"
	// PartnerSuspended (PERMISSION_DENIED): the key's partner is suspended.
	PartnerSuspended Reason = "PARTNER_SUSPENDED"
	// PartnerMismatch (PERMISSION_DENIED): partner_id is not the key's.
	PartnerMismatch Reason = "PARTNER_MISMATCH"
	// MarketNotEnabled (PERMISSION_DENIED): the partner may not use the
	// market.
	MarketNotEnabled Reason = "MARKET_NOT_ENABLED"
	// PaymentTypeNotEnabled (PERMISSION_DENIED): the partner may not use
	// the payment type.
	PaymentTypeNotEnabled Reason = "PAYMENT_TYPE_NOT_ENABLED"
	// InvalidRequest (INVALID_ARGUMENT): a field is missing or invalid;
	// a google.rpc.BadRequest detail names it. Retrying unchanged fails
	// the same way.
	InvalidRequest Reason = "INVALID_REQUEST"
	// RequestTooLarge (RESOURCE_EXHAUSTED): the request is over the size
	// limit.
	RequestTooLarge Reason = "REQUEST_TOO_LARGE"
	// TransactionIDReused (ALREADY_EXISTS): the transaction_id was used
	// with another payload.
	TransactionIDReused Reason = "TRANSACTION_ID_REUSED"
	// TransactionNotFound (NOT_FOUND): no transaction of this partner has
	// the ID (another partner's is not found either).
	TransactionNotFound Reason = "TRANSACTION_NOT_FOUND"
	// TransactionInProgress (ABORTED): a concurrent call for the same
	// transaction is being processed; retry unchanged shortly.
	TransactionInProgress Reason = "TRANSACTION_IN_PROGRESS"
	// RateLimited (RESOURCE_EXHAUSTED): over the partner's rate; retry
	// unchanged after the google.rpc.RetryInfo delay (REST: Retry-After).
	RateLimited Reason = "RATE_LIMITED"
	// TooManyInFlight (RESOURCE_EXHAUSTED): at the partner's cap of calls
	// in flight; retry unchanged after the RetryInfo delay.
	TooManyInFlight Reason = "TOO_MANY_IN_FLIGHT"
	// Overloaded (RESOURCE_EXHAUSTED): the platform refused the call
	// before any cell to protect itself; nothing was charged; retry
	// unchanged after the RetryInfo delay.
	Overloaded Reason = "OVERLOADED"
	// NoRoute (UNAVAILABLE): no routing rule or no cell for the partner,
	// market and payment type now.
	NoRoute Reason = "NO_ROUTE"
	// Unavailable (UNAVAILABLE): the platform could not take the call
	// now; retry unchanged under the same transaction_id.
	Unavailable Reason = "UNAVAILABLE"
	// DeadlineExceeded (DEADLINE_EXCEEDED): the outcome was not known in
	// time; read it with GetTransaction or retry unchanged.
	DeadlineExceeded Reason = "DEADLINE_EXCEEDED"
	// Cancelled (CANCELLED): the caller gave up the call.
	Cancelled Reason = "CANCELLED"
	// NotSupported (UNIMPLEMENTED): no such operation (REST: no such path
	// or method).
	NotSupported Reason = "NOT_SUPPORTED"
	// Internal (INTERNAL): a fault of the platform; quote the request ID.
	Internal Reason = "INTERNAL"
	// OriginalNotFound (FAILED_PRECONDITION): a capture, void or refund
	// names an original_transaction_id that no transaction of the partner
	// has. Between the GTR and a cell it is NOT_FOUND ("not here": the
	// GTR looks further); the GTR answers the partner FAILED_PRECONDITION.
	OriginalNotFound Reason = "ORIGINAL_NOT_FOUND"
	// OriginalNotApproved (FAILED_PRECONDITION): the original is not an
	// approved CARD_AUTHORIZATION (declined, failed, still pending, or of
	// another payment type).
	OriginalNotApproved Reason = "ORIGINAL_NOT_APPROVED"
	// OriginalMismatch (FAILED_PRECONDITION): the follow-up's market or
	// currency is not the original's.
	OriginalMismatch Reason = "ORIGINAL_MISMATCH"
	// CaptureExceedsAuthorization (FAILED_PRECONDITION): the captures
	// would pass the authorized amount (those still pending count).
	CaptureExceedsAuthorization Reason = "CAPTURE_EXCEEDS_AUTHORIZATION"
	// RefundExceedsCaptured (FAILED_PRECONDITION): the refunds would pass
	// the captured amount.
	RefundExceedsCaptured Reason = "REFUND_EXCEEDS_CAPTURED"
	// RefundBeforeCapture (FAILED_PRECONDITION): nothing of the
	// authorization is captured yet (a capture whose outcome is still
	// unknown is not).
	RefundBeforeCapture Reason = "REFUND_BEFORE_CAPTURE"
	// VoidAfterCapture (FAILED_PRECONDITION): the authorization has a
	// capture; refund it instead.
	VoidAfterCapture Reason = "VOID_AFTER_CAPTURE"
	// OriginalVoided (FAILED_PRECONDITION): the authorization was voided.
	OriginalVoided Reason = "ORIGINAL_VOIDED"
)

// All returns every reason, in the order above.
func All() []Reason {
	return []Reason{APIKeyMissing, APIKeyInvalid, PartnerSuspended, PartnerMismatch, MarketNotEnabled,
		PaymentTypeNotEnabled, InvalidRequest, RequestTooLarge, TransactionIDReused, TransactionNotFound,
		TransactionInProgress, RateLimited, TooManyInFlight, Overloaded, NoRoute, Unavailable,
		DeadlineExceeded, Cancelled, NotSupported, Internal, OriginalNotFound, OriginalNotApproved,
		OriginalMismatch, CaptureExceedsAuthorization, RefundExceedsCaptured, RefundBeforeCapture, VoidAfterCapture, OriginalVoided}
}

// ForCode is the reason of a refusal whose site named none: the one its
// gRPC code means to a partner.
func ForCode(c codes.Code) Reason {
	switch c {
	case codes.InvalidArgument, codes.OutOfRange, codes.FailedPrecondition:
		return InvalidRequest
	case codes.AlreadyExists:
		return TransactionIDReused
	case codes.NotFound:
		return TransactionNotFound
	case codes.Aborted:
		return TransactionInProgress
	case codes.ResourceExhausted:
		return Overloaded
	case codes.Unauthenticated:
		return APIKeyInvalid
	case codes.PermissionDenied:
		return PartnerMismatch
	case codes.Unavailable:
		return Unavailable
	case codes.DeadlineExceeded:
		return DeadlineExceeded
	case codes.Canceled:
		return Cancelled
	case codes.Unimplemented:
		return NotSupported
	}
	return Internal
}

// New returns a status with code, msg and an ErrorInfo of reason.
func New(code codes.Code, reason Reason, msg string) *status.Status {
	return with(status.New(code, msg), reason, "")
}

// Error is New's error.
func Error(code codes.Code, reason Reason, msg string) error { return New(code, reason, msg).Err() }

// WithRequestID returns st with requestID in its ErrorInfo's metadata,
// adding an ErrorInfo of ForCode's reason where st has none. An OK st is
// returned as it is.
func WithRequestID(st *status.Status, requestID string) *status.Status {
	if st.Code() == codes.OK {
		return st
	}
	return with(st, "", requestID)
}

// with sets st's ErrorInfo: its reason (kept if reason is "" and it has
// one; else ForCode's) and its request ID (if not "").
func with(st *status.Status, reason Reason, requestID string) *status.Status {
	p := st.Proto()
	var info *errdetails.ErrorInfo
	at := -1
	for i, d := range p.GetDetails() {
		var ei errdetails.ErrorInfo
		if d.MessageIs(&ei) && d.UnmarshalTo(&ei) == nil {
			info, at = &ei, i
			break
		}
	}
	if info == nil {
		info = &errdetails.ErrorInfo{Domain: Domain}
	}
	switch {
	case reason != "":
		info.Reason = string(reason)
	case info.Reason == "":
		info.Reason = string(ForCode(st.Code()))
	}
	if requestID != "" {
		if info.Metadata == nil {
			info.Metadata = map[string]string{}
		}
		info.Metadata[MetadataRequestID] = requestID
	}
	a, err := anypb.New(info)
	if err != nil {
		return st
	}
	if at >= 0 {
		p.Details[at] = a
	} else {
		p.Details = append(p.Details, a)
	}
	return status.FromProto(p)
}

// Info returns err's ErrorInfo, nil if it has none.
func Info(err error) *errdetails.ErrorInfo {
	st, ok := status.FromError(err)
	if !ok {
		return nil
	}
	for _, d := range st.Details() {
		if ei, ok := d.(*errdetails.ErrorInfo); ok {
			return ei
		}
	}
	return nil
}

// ReasonOf returns err's reason, "" if it carries none.
func ReasonOf(err error) Reason {
	if ei := Info(err); ei != nil && ei.GetDomain() == Domain {
		return Reason(ei.GetReason())
	}
	return ""
}

// RequestIDOf returns the request ID err carries, "" if none.
func RequestIDOf(err error) string { return Info(err).GetMetadata()[MetadataRequestID] }

// NewRequestID returns a new request ID: 16 hex digits of crypto/rand.
func NewRequestID() string {
	var b [8]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	return hex.EncodeToString(b[:])
}
