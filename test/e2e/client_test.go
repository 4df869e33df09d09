package e2e

import (
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/cellpay/cellpay/pkg/api/cellpayv1"
	"github.com/cellpay/cellpay/pkg/client"
)

// TestPartnerClient drives the real GTR through the partners' Go client:
// a submission, its replay, and a read.
func TestPartnerClient(t *testing.T) {
	ctx := ctxFor(t, time.Minute)
	keys, err := env.p.PartnerKeys()
	if err != nil {
		t.Fatal(err)
	}
	r := request("client", "5555555555554444")
	c, err := client.Dial(env.gtrAddr, client.Config{PartnerID: r.PartnerId, APIKey: keys[r.PartnerId], CAFile: env.p.CAFile()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	got, err := c.SubmitAndWait(ctx, r)
	if err != nil || got.GetStatus() != cellpayv1.TransactionStatus_APPROVED {
		t.Fatalf("SubmitAndWait = %v, %v", got, err)
	}
	again, err := c.Submit(ctx, r)
	if err != nil || !proto.Equal(got, again) {
		t.Fatalf("replay = %v, %v; want %v", again, err, got)
	}
	read, err := c.WaitFinal(ctx, r.TransactionId)
	if err != nil || !proto.Equal(read, got) {
		t.Fatalf("WaitFinal = %v, %v", read, err)
	}
}
