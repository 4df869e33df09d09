package refusals

import (
	"fmt"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/cellpay/cellpay/pkg/api/apierr"
)

// TestRingKeepsTheLastSize: a refusal is found by its request ID with
// what it was recorded with (its reason, or the code's when it carried
// none; a card number in its message masked) until Size more have come;
// an ID reused keeps the newest; an empty ID is not kept.
func TestRingKeepsTheLastSize(t *testing.T) {
	now := time.Date(2026, 12, 7, 5, 0, 0, 0, time.UTC)
	r := New(func() time.Time { return now })
	r.Add("first", "/cellpay.v1.Payments/SubmitTransaction", "p-1", "t-1",
		status.New(codes.InvalidArgument, "card.pan: 4111111111111111 fails the Luhn check"))
	got, ok := r.Find("first")
	if !ok || got.Code != "InvalidArgument" || got.Reason != string(apierr.ForCode(codes.InvalidArgument)) || got.PartnerID != "p-1" ||
		got.TransactionID != "t-1" || !got.Time.Equal(now) {
		t.Fatalf("found %+v, %v", got, ok)
	}
	if got.Message == "card.pan: 4111111111111111 fails the Luhn check" {
		t.Fatalf("a card number left in the message: %q", got.Message)
	}
	r.Add("", "m", "", "", status.New(codes.Internal, "x"))
	if _, ok := r.Find(""); ok {
		t.Fatal("an empty ID kept")
	}
	r.Add("twice", "m", "", "", apierr.New(codes.ResourceExhausted, apierr.RateLimited, "one"))
	r.Add("twice", "m", "", "", apierr.New(codes.ResourceExhausted, apierr.RateLimited, "two"))
	if got, _ := r.Find("twice"); got.Message != "two" || got.Reason != string(apierr.RateLimited) {
		t.Fatalf("reused ID: %+v", got)
	}
	for i := range Size - 2 {
		r.Add(fmt.Sprint("n-", i), "m", "", "", status.New(codes.Internal, "x"))
	}
	if _, ok := r.Find("first"); ok {
		t.Fatal("the oldest kept past Size")
	}
	if _, ok := r.Find("twice"); !ok {
		t.Fatal("a refusal within the last Size lost")
	}
	if len(r.byID) > Size {
		t.Fatalf("%d IDs indexed, over %d", len(r.byID), Size)
	}
}
