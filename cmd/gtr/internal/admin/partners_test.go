package admin

import (
	"bytes"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/cellpay/cellpay/internal/dev/testutil/natstest"
	"github.com/cellpay/cellpay/internal/partners"
	"github.com/cellpay/cellpay/internal/partnerstate"
	"github.com/cellpay/cellpay/pkg/adminproto"
)

const callbackSecret = "whsec_c2VjcmV0LXNpZ25pbmcta2V5LWZvci10ZXN0cw=="

// seededPartners writes a registry with one partner that has a key and a
// callback signing secret, and returns the file and that key.
func seededPartners(t *testing.T) (file, key string) {
	t.Helper()
	plain, k, err := partners.NewKey(nil, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	file = filepath.Join(t.TempDir(), "partners.yaml")
	yaml := "version: 1\npartners:\n  - id: p-seed\n    status: active\n    keys:\n      - id: " + k.ID + "\n        hash: " + k.Hash +
		"\n        created: " + k.Created.Format(time.RFC3339) + "\n    callbacks:\n      mode: ordered\n      endpoints: [\"https://a.example/cb\", \"https://b.example/cb\"]\n      secrets: [\"" + callbackSecret + "\"]\n"
	if err := os.WriteFile(file, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	return file, plain
}

func authAs(t *testing.T, f fixture, key, partner string) {
	t.Helper()
	p, err := f.ps.Index().Authenticate(key)
	if err != nil || p.ID != partner {
		t.Fatalf("key %s: %v, %v; want partner %s", partners.KeyID(key), p, err, partner)
	}
}

func refused(t *testing.T, f fixture, key string, want error) {
	t.Helper()
	if _, err := f.ps.Index().Authenticate(key); !errors.Is(err, want) {
		t.Fatalf("key %s: %v, want %v", partners.KeyID(key), err, want)
	}
}

func TestPartnerLifecycle(t *testing.T) {
	f := start(t, token)
	c := client(t, f.addr, token)
	ctx := ctxFor(t)

	add, err := c.AddPartner(ctx, &adminproto.AddPartnerRequest{PartnerId: "p-001", SettlementCurrency: "EUR",
		Markets: []string{"GB", "DE"}, PaymentTypes: []string{"CARD_AUTHORIZATION"}, Limits: &adminproto.PartnerLimits{RatePerSecond: 50}})
	if err != nil {
		t.Fatal(err)
	}
	k1 := add.GetKey().GetApiKey()
	authAs(t, f, k1, "p-001")
	p := add.GetPartner()
	if add.GetRegistryVersion() != 1 || p.GetStatus() != adminproto.PartnerStatus_PARTNER_STATUS_ACTIVE || len(p.GetKeys()) != 1 ||
		p.GetKeys()[0].GetKeyId() != add.GetKey().GetKeyId() || add.GetKey().GetKeyId() != partners.KeyID(k1) ||
		p.GetEffectiveLimits().GetBurst() != 50 || p.GetLimits().GetBurst() != 0 || p.GetSettlementCurrency() != "EUR" {
		t.Fatalf("add: %v", add)
	}

	ak, err := c.AddKey(ctx, &adminproto.AddKeyRequest{PartnerId: "p-001"})
	if err != nil {
		t.Fatal(err)
	}
	k2 := ak.GetKey().GetApiKey()
	if k2 == k1 || len(ak.GetPartner().GetKeys()) != 2 || ak.GetRegistryVersion() != 2 {
		t.Fatalf("add key: %v", ak)
	}
	authAs(t, f, k1, "p-001")
	authAs(t, f, k2, "p-001")

	rk, err := c.RevokeKey(ctx, &adminproto.RevokeKeyRequest{PartnerId: "p-001", KeyId: partners.KeyID(k1)})
	if err != nil {
		t.Fatal(err)
	}
	if len(rk.GetPartner().GetKeys()) != 1 || rk.GetPartner().GetKeys()[0].GetKeyId() != partners.KeyID(k2) {
		t.Fatalf("revoke: %v", rk)
	}
	refused(t, f, k1, partners.ErrUnauthenticated)
	authAs(t, f, k2, "p-001")

	// The last key stays unless forced.
	before := f.ps.Index()
	_, err = c.RevokeKey(ctx, &adminproto.RevokeKeyRequest{PartnerId: "p-001", KeyId: partners.KeyID(k2)})
	if status.Code(err) != codes.FailedPrecondition || f.ps.Index() != before {
		t.Fatalf("revoke the last key without force: %v", err)
	}
	authAs(t, f, k2, "p-001")

	sp, err := c.SuspendPartner(ctx, &adminproto.SuspendPartnerRequest{PartnerId: "p-001"})
	if err != nil || sp.GetPartner().GetStatus() != adminproto.PartnerStatus_PARTNER_STATUS_SUSPENDED {
		t.Fatalf("suspend: %v %v", sp, err)
	}
	refused(t, f, k2, partners.ErrSuspended)
	again, err := c.SuspendPartner(ctx, &adminproto.SuspendPartnerRequest{PartnerId: "p-001"})
	if err != nil || again.GetRegistryVersion() != sp.GetRegistryVersion() || f.ps.Index().Version() != sp.GetRegistryVersion() {
		t.Fatalf("suspending a suspended partner changed the registry: %v %v", again, err)
	}
	if _, err := c.ResumePartner(ctx, &adminproto.ResumePartnerRequest{PartnerId: "p-001"}); err != nil {
		t.Fatal(err)
	}
	authAs(t, f, k2, "p-001")

	if _, err := c.RevokeKey(ctx, &adminproto.RevokeKeyRequest{PartnerId: "p-001", KeyId: partners.KeyID(k2), Force: true}); err != nil {
		t.Fatalf("forced revoke of the last key: %v", err)
	}
	refused(t, f, k2, partners.ErrUnauthenticated)

	// Audit lines name the partner and key IDs, never a key.
	log := f.log.String()
	for _, want := range []string{"admin: partner added", "admin: partner key added", "admin: partner key revoked", "key_id=" + partners.KeyID(k1)} {
		if !strings.Contains(log, want) {
			t.Errorf("log lacks %q:\n%s", want, log)
		}
	}
	for _, k := range []string{k1, k2} {
		if strings.Contains(log, k) || strings.Contains(log, k[len(k)-64:]) {
			t.Fatalf("a key reached the log:\n%s", log)
		}
	}
}

// TestListNeverShowsSecrets: ListPartners carries key IDs and creation
// times, never a key, a hash or a callback signing secret, in any encoding.
func TestListNeverShowsSecrets(t *testing.T) {
	file, seedKey := seededPartners(t)
	f := startWith(t, token, partnerstate.Config{File: file})
	c := client(t, f.addr, token)
	ctx := ctxFor(t)
	authAs(t, f, seedKey, "p-seed")
	add, err := c.AddPartner(ctx, &adminproto.AddPartnerRequest{PartnerId: "p-new"})
	if err != nil {
		t.Fatal(err)
	}
	ak, err := c.AddKey(ctx, &adminproto.AddKeyRequest{PartnerId: "p-new"})
	if err != nil {
		t.Fatal(err)
	}
	list, err := c.ListPartners(ctx, &adminproto.ListPartnersRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if list.GetRegistryVersion() != 3 || len(list.GetPartners()) != 2 || list.GetConfigStore() != "standalone" {
		t.Fatalf("list: %v", list)
	}
	seed := list.GetPartners()[0]
	if seed.GetId() != "p-seed" || seed.GetCallbacks().GetMode() != "ordered" || len(seed.GetCallbacks().GetEndpoints()) != 2 ||
		seed.GetCallbacks().GetSigningSecrets() != 1 || len(seed.GetKeys()) != 1 || seed.GetKeys()[0].GetCreated() == nil {
		t.Fatalf("seeded partner: %v", seed)
	}
	wire, err := proto.Marshal(list)
	if err != nil {
		t.Fatal(err)
	}
	js, err := protojson.Marshal(list)
	if err != nil {
		t.Fatal(err)
	}
	forbidden := map[string]string{"callback secret": callbackSecret}
	for i, k := range []string{seedKey, add.GetKey().GetApiKey(), ak.GetKey().GetApiKey()} {
		forbidden["key "+string(rune('0'+i))] = k
		forbidden["key secret "+string(rune('0'+i))] = k[len(k)-64:]
	}
	for _, p := range f.ps.Index().Registry().Partners {
		for _, k := range p.Keys {
			raw, _ := hex.DecodeString(k.Hash)
			forbidden["hash of "+k.ID] = k.Hash
			forbidden["raw hash of "+k.ID] = string(raw)
			if !bytes.Contains(wire, []byte(k.ID)) {
				t.Errorf("key ID %s missing from the list", k.ID)
			}
		}
	}
	if len(forbidden) != 1+2*3+2*3 {
		t.Fatalf("%d forbidden strings: the registry is not what the test set up", len(forbidden))
	}
	for what, s := range forbidden {
		if bytes.Contains(wire, []byte(s)) || bytes.Contains(js, []byte(s)) {
			t.Errorf("ListPartners carries the %s", what)
		}
	}
}

// TestPartnerErrors: every refused request gets its code, names its field
// when it is bad input, never quotes a key, and changes nothing.
func TestPartnerErrors(t *testing.T) {
	f := start(t, token)
	c := client(t, f.addr, token)
	ctx := ctxFor(t)
	add, err := c.AddPartner(ctx, &adminproto.AddPartnerRequest{PartnerId: "p-001"})
	if err != nil {
		t.Fatal(err)
	}
	key := add.GetKey().GetApiKey()
	for range partners.MaxKeysPerPartner - 1 {
		if _, err := c.AddKey(ctx, &adminproto.AddKeyRequest{PartnerId: "p-001"}); err != nil {
			t.Fatal(err)
		}
	}
	otherID := strings.Repeat("a", 16)
	tests := []struct {
		name  string
		call  func() error
		code  codes.Code
		field string
	}{
		{"add existing", func() error {
			_, err := c.AddPartner(ctx, &adminproto.AddPartnerRequest{PartnerId: "p-001"})
			return err
		}, codes.AlreadyExists, ""},
		{"add without id", func() error {
			_, err := c.AddPartner(ctx, &adminproto.AddPartnerRequest{})
			return err
		}, codes.InvalidArgument, "partner_id"},
		{"add bad id", func() error {
			_, err := c.AddPartner(ctx, &adminproto.AddPartnerRequest{PartnerId: "p 2"})
			return err
		}, codes.InvalidArgument, "partner_id"},
		{"add bad market", func() error {
			_, err := c.AddPartner(ctx, &adminproto.AddPartnerRequest{PartnerId: "p-2", Markets: []string{"GB", "gb"}})
			return err
		}, codes.InvalidArgument, "markets[1]"},
		{"add bad payment type", func() error {
			_, err := c.AddPartner(ctx, &adminproto.AddPartnerRequest{PartnerId: "p-2", PaymentTypes: []string{"CASH"}})
			return err
		}, codes.InvalidArgument, "payment_types[0]"},
		{"add bad currency", func() error {
			_, err := c.AddPartner(ctx, &adminproto.AddPartnerRequest{PartnerId: "p-2", SettlementCurrency: "euro"})
			return err
		}, codes.InvalidArgument, "settlement_currency"},
		{"add bad limits", func() error {
			_, err := c.AddPartner(ctx, &adminproto.AddPartnerRequest{PartnerId: "p-2", Limits: &adminproto.PartnerLimits{Burst: -1}})
			return err
		}, codes.InvalidArgument, "limits"},
		{"suspend unknown", func() error {
			_, err := c.SuspendPartner(ctx, &adminproto.SuspendPartnerRequest{PartnerId: "nope"})
			return err
		}, codes.NotFound, ""},
		{"suspend without id", func() error {
			_, err := c.SuspendPartner(ctx, &adminproto.SuspendPartnerRequest{})
			return err
		}, codes.InvalidArgument, "partner_id"},
		{"resume unknown", func() error {
			_, err := c.ResumePartner(ctx, &adminproto.ResumePartnerRequest{PartnerId: "nope"})
			return err
		}, codes.NotFound, ""},
		{"add key unknown", func() error {
			_, err := c.AddKey(ctx, &adminproto.AddKeyRequest{PartnerId: "nope"})
			return err
		}, codes.NotFound, ""},
		{"add key past the most", func() error {
			_, err := c.AddKey(ctx, &adminproto.AddKeyRequest{PartnerId: "p-001"})
			return err
		}, codes.FailedPrecondition, ""},
		{"revoke unknown partner", func() error {
			_, err := c.RevokeKey(ctx, &adminproto.RevokeKeyRequest{PartnerId: "nope", KeyId: partners.KeyID(key)})
			return err
		}, codes.NotFound, ""},
		{"revoke unknown key", func() error {
			_, err := c.RevokeKey(ctx, &adminproto.RevokeKeyRequest{PartnerId: "p-001", KeyId: otherID})
			return err
		}, codes.NotFound, ""},
		{"revoke without key id", func() error {
			_, err := c.RevokeKey(ctx, &adminproto.RevokeKeyRequest{PartnerId: "p-001"})
			return err
		}, codes.InvalidArgument, "key_id"},
		{"revoke by the key itself", func() error {
			_, err := c.RevokeKey(ctx, &adminproto.RevokeKeyRequest{PartnerId: "p-001", KeyId: key})
			return err
		}, codes.InvalidArgument, "key_id"},
		{"a key as the partner id", func() error {
			_, err := c.AddKey(ctx, &adminproto.AddKeyRequest{PartnerId: key})
			return err
		}, codes.InvalidArgument, "partner_id"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := f.ps.Index()
			err := tc.call()
			st := status.Convert(err)
			if st.Code() != tc.code {
				t.Fatalf("got %v, want %v", err, tc.code)
			}
			if tc.field != "" && !hasField(st, tc.field) {
				t.Fatalf("error %v does not name field %q (details %v)", err, tc.field, st.Details())
			}
			if strings.Contains(st.Message(), key) || strings.Contains(st.Message(), key[len(key)-64:]) {
				t.Fatalf("the error quotes a key: %v", err)
			}
			if f.ps.Index() != before {
				t.Fatal("a refused request changed the registry")
			}
		})
	}
	authAs(t, f, key, "p-001")
}

// TestPartnersUnavailable: with the config store away, partner changes
// answer UNAVAILABLE and the list keeps answering.
func TestPartnersUnavailable(t *testing.T) {
	ns := natstest.Start(t)
	url := ns.URL()
	ns.Stop()
	f := startWith(t, token, partnerstate.Config{NATSURL: url, OpTimeout: time.Second})
	c := client(t, f.addr, token)
	ctx := ctxFor(t)
	if _, err := c.AddPartner(ctx, &adminproto.AddPartnerRequest{PartnerId: "p-001"}); status.Code(err) != codes.Unavailable {
		t.Fatalf("add with the store away: %v", err)
	}
	if _, err := c.SuspendPartner(ctx, &adminproto.SuspendPartnerRequest{PartnerId: "p-001"}); status.Code(err) != codes.Unavailable {
		t.Fatalf("suspend with the store away: %v", err)
	}
	list, err := c.ListPartners(ctx, &adminproto.ListPartnersRequest{})
	if err != nil || list.GetConfigStore() != "disconnected" {
		t.Fatalf("list with the store away: %v %v", list, err)
	}
}

func TestPartnerRPCsNeedTheToken(t *testing.T) {
	f := start(t, token)
	c := client(t, f.addr, "")
	ctx := ctxFor(t)
	if _, err := c.ListPartners(ctx, &adminproto.ListPartnersRequest{}); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("list without a token: %v", err)
	}
	if _, err := c.AddPartner(ctx, &adminproto.AddPartnerRequest{PartnerId: "p-001"}); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("add without a token: %v", err)
	}
	if len(f.ps.Index().Registry().Partners) != 0 {
		t.Fatal("a partner was added without the token")
	}
}
