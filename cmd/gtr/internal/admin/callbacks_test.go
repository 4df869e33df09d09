package admin

import (
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/cellpay/cellpay/pkg/adminproto"
	"github.com/cellpay/cellpay/pkg/cellproto"
)

// TestCallbackSettings: SetCallbacks sets mode and endpoints and keeps the
// secrets; AddCallbackSecret shows a new secret once, newest first, up to
// the cap (or alone with drop_older); no list and no log line shows one;
// bad settings name their field.
func TestCallbackSettings(t *testing.T) {
	f := start(t, token)
	c := client(t, f.addr, token)
	ctx := ctxFor(t)
	if _, err := c.AddPartner(ctx, &adminproto.AddPartnerRequest{PartnerId: "p-cb"}); err != nil {
		t.Fatal(err)
	}
	var secrets []string
	for range 2 {
		s, err := c.AddCallbackSecret(ctx, &adminproto.AddCallbackSecretRequest{PartnerId: "p-cb"})
		if err != nil || !strings.HasPrefix(s.GetSecret(), "whsec_") {
			t.Fatalf("add secret: %v %v", s, err)
		}
		secrets = append(secrets, s.GetSecret())
	}
	set, err := c.SetCallbacks(ctx, &adminproto.SetCallbacksRequest{PartnerId: "p-cb", Mode: "reverse",
		Endpoints: []string{"https://a.example/cb", "https://b.example/cb"}, Public: "https://pub.example/cb"})
	if err != nil {
		t.Fatal(err)
	}
	cb := set.GetPartner().GetCallbacks()
	if cb.GetMode() != "reverse" || len(cb.GetEndpoints()) != 2 || cb.GetPublic() == "" || cb.GetSigningSecrets() != 2 {
		t.Fatalf("after set: %v", cb)
	}
	reg := f.ps.Index().Registry()
	p, _ := reg.Find("p-cb")
	if p.Callbacks.Secrets[0] != secrets[1] || p.Callbacks.Secrets[1] != secrets[0] {
		t.Fatal("secrets not newest first, or changed by SetCallbacks")
	}
	for range 2 {
		if _, err := c.AddCallbackSecret(ctx, &adminproto.AddCallbackSecretRequest{PartnerId: "p-cb"}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.AddCallbackSecret(ctx, &adminproto.AddCallbackSecretRequest{PartnerId: "p-cb"}); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("a fifth secret: %v", err)
	}
	last, err := c.AddCallbackSecret(ctx, &adminproto.AddCallbackSecretRequest{PartnerId: "p-cb", DropOlder: true})
	if err != nil || last.GetPartner().GetCallbacks().GetSigningSecrets() != 1 {
		t.Fatalf("drop older: %v %v", last, err)
	}
	secrets = append(secrets, last.GetSecret())
	_, err = c.SetCallbacks(ctx, &adminproto.SetCallbacksRequest{PartnerId: "p-cb", Mode: "sideways"})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "callbacks.mode") {
		t.Fatalf("bad mode: %v", err)
	}
	_, err = c.SetCallbacks(ctx, &adminproto.SetCallbacksRequest{PartnerId: "p-cb", Endpoints: []string{"ftp://x"}})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "callbacks.endpoints[0]") {
		t.Fatalf("bad endpoint: %v", err)
	}
	list, err := c.ListPartners(ctx, &adminproto.ListPartnersRequest{})
	if err != nil {
		t.Fatal(err)
	}
	shown := protojson.Format(list) + f.log.String()
	for _, s := range secrets {
		if strings.Contains(shown, s) || strings.Contains(shown, strings.TrimPrefix(s, "whsec_")) {
			t.Fatal("a signing secret is listed or logged")
		}
	}
	if _, err := c.ListCallbacks(ctx, &cellproto.ListCallbacksRequest{}); status.Code(err) != codes.Unimplemented {
		t.Fatalf("ListCallbacks without cells: %v", err)
	}
}
