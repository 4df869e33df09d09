package issuersim

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/cellpay/cellpay/pkg/issuerproto"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// FuzzAuthorize checks that no request panics, fails with anything but
// INVALID_ARGUMENT (no faults are set), answers inconsistently on a repeat,
// is applied after an inquiry closed its transaction, or puts its PAN into
// an error or a log line.
func FuzzAuthorize(f *testing.F) {
	f.Add("t1", CardApproved, int32(12), int32(2030), int64(1000), "EUR", "m", "5411", false)
	f.Add("t2", CardStolen, int32(1), int32(20), int64(1), "USD", "m", "5999", true)
	f.Add("", "", int32(0), int32(0), int64(0), "", "", "", false)
	f.Add("t3", "4000000000000069", int32(13), int32(-1), int64(-5), "x", "y", "z", false)
	f.Add("t4", "123", int32(6), int32(26), int64(9_223_372_036_854_775_807), "", "", "", false)

	f.Fuzz(func(t *testing.T, id, pan string, month, year int32, amount int64, currency, merchant, mcc string, refund bool) {
		var logs bytes.Buffer
		log := slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{
			Level: slog.LevelDebug,
			// Time carries digits that a short numeric PAN could match.
			ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
				if a.Key == slog.TimeKey {
					return slog.Attr{}
				}
				return a
			},
		}))
		s := New(Config{Now: func() time.Time { return fixedNow }, Logger: log})
		req := &issuerproto.AuthorizeRequest{
			PartnerId: "p-fuzz", TransactionId: id, Pan: pan, ExpiryMonth: month, ExpiryYear: year,
			AmountMinorUnits: amount, Currency: currency, MerchantId: merchant, Mcc: mcc, Refund: refund,
		}
		ctx := t.Context()
		resp, err := s.Authorize(ctx, req)
		var msgs []string
		if err != nil {
			if code := status.Code(err); code != codes.InvalidArgument {
				t.Fatalf("code %v (%v), want INVALID_ARGUMENT or success", code, err)
			}
			msgs = append(msgs, err.Error())
		} else {
			again, err := s.Authorize(ctx, req)
			if err != nil {
				t.Fatalf("repeat failed: %v", err)
			}
			if !again.GetDuplicate() || again.GetApproved() != resp.GetApproved() ||
				again.GetAuthCode() != resp.GetAuthCode() || again.GetDeclineReason() != resp.GetDeclineReason() {
				t.Fatalf("repeat got %v after %v", again, resp)
			}
			if resp.GetApproved() == (resp.GetAuthCode() == "") {
				t.Fatalf("approved=%v with auth code %q", resp.GetApproved(), resp.GetAuthCode())
			}
		}
		if _, err := s.Inquire(ctx, &issuerproto.InquireRequest{PartnerId: req.GetPartnerId(), TransactionId: id}); err != nil {
			msgs = append(msgs, err.Error())
		}
		// The same request of another partner, after an inquiry closed
		// that partner's transaction: refused, or invalid as before.
		closed := proto.Clone(req).(*issuerproto.AuthorizeRequest)
		closed.PartnerId = "p-fuzz-closed"
		if _, err := s.Inquire(ctx, &issuerproto.InquireRequest{PartnerId: closed.GetPartnerId(), TransactionId: id, Close: true}); err != nil {
			msgs = append(msgs, err.Error())
		}
		if resp, err := s.Authorize(ctx, closed); err == nil {
			t.Fatalf("Authorize of a closed transaction answered %v", resp)
		} else if code := status.Code(err); code != codes.FailedPrecondition && code != codes.InvalidArgument {
			t.Fatalf("Authorize of a closed transaction: code %v (%v), want FAILED_PRECONDITION or INVALID_ARGUMENT", code, err)
		} else {
			msgs = append(msgs, err.Error())
		}
		// Every logged value but the transaction ID, which carries whatever
		// the caller put in it (the partner is fixed and has no digits).
		dec := json.NewDecoder(&logs)
		for dec.More() {
			var line map[string]any
			if err := dec.Decode(&line); err != nil {
				t.Fatalf("log line: %v", err)
			}
			delete(line, "transaction_id")
			for k, v := range line {
				msgs = append(msgs, fmt.Sprintf("%s=%v", k, v))
			}
		}

		// Messages and log keys carry no digits of their own, so a numeric
		// PAN found there leaked from the request.
		if pan == "" || !allDigits(pan) {
			return
		}
		for _, m := range msgs {
			if strings.Contains(m, pan) {
				t.Fatalf("PAN found in %q", m)
			}
		}
	})
}

func allDigits(s string) bool {
	for i := range len(s) {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}
