package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/cellpay/cellpay/internal/partners"
	"github.com/cellpay/cellpay/pkg/adminproto"
)

// partnersAdmin is an Admin server for the partner commands: it checks the
// token, records requests and answers with made-up keys.
type partnersAdmin struct {
	fakeAdmin
	mu     sync.Mutex
	add    *adminproto.AddPartnerRequest
	addKey *adminproto.AddKeyRequest
	revoke *adminproto.RevokeKeyRequest
	status map[string]adminproto.PartnerStatus
	keys   []string // plaintext of the keys it made
}

const listedKeyID = "abcdefghijklmnop"

func (f *partnersAdmin) partner(id string) *adminproto.Partner {
	st := f.status[id]
	if st == adminproto.PartnerStatus_PARTNER_STATUS_UNSPECIFIED {
		st = adminproto.PartnerStatus_PARTNER_STATUS_ACTIVE
	}
	return &adminproto.Partner{Id: id, Status: st, Keys: []*adminproto.PartnerKey{{KeyId: listedKeyID, Created: timestamppb.New(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))}},
		EffectiveLimits: &adminproto.PartnerLimits{RatePerSecond: 1000, Burst: 1000, MaxInFlight: 1000}}
}

func (f *partnersAdmin) newKey() *adminproto.NewKey {
	k, key, _ := partners.NewKey(nil, time.Now())
	f.keys = append(f.keys, k)
	return &adminproto.NewKey{KeyId: key.ID, ApiKey: k, Created: timestamppb.New(key.Created)}
}

func (f *partnersAdmin) ListPartners(ctx context.Context, _ *adminproto.ListPartnersRequest) (*adminproto.ListPartnersResponse, error) {
	if err := f.auth(ctx); err != nil {
		return nil, err
	}
	p := f.partner("p-001")
	p.SettlementCurrency, p.Markets, p.HomeSite = "EUR", []string{"GB", "DE"}, "site-a"
	p.Limits = &adminproto.PartnerLimits{RatePerSecond: 50}
	p.EffectiveLimits = &adminproto.PartnerLimits{RatePerSecond: 50, Burst: 50, MaxInFlight: 50}
	p.Callbacks = &adminproto.PartnerCallbacks{Mode: "ordered", Endpoints: []string{"https://a.example/cb"}, SigningSecrets: 2}
	q := f.partner("p-002")
	q.Status = adminproto.PartnerStatus_PARTNER_STATUS_SUSPENDED
	q.Keys = nil
	return &adminproto.ListPartnersResponse{RegistryVersion: 7, ReplicaId: "r1", ConfigStore: "connected", Partners: []*adminproto.Partner{p, q}}, nil
}

func (f *partnersAdmin) AddPartner(ctx context.Context, req *adminproto.AddPartnerRequest) (*adminproto.AddPartnerResponse, error) {
	if err := f.auth(ctx); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.add = req
	if req.PartnerId == "p-001" {
		return nil, status.Error(codes.AlreadyExists, `partners: partner already exists: "p-001"`)
	}
	return &adminproto.AddPartnerResponse{Partner: f.partner(req.PartnerId), Key: f.newKey(), RegistryVersion: 8}, nil
}

func (f *partnersAdmin) AddKey(ctx context.Context, req *adminproto.AddKeyRequest) (*adminproto.AddKeyResponse, error) {
	if err := f.auth(ctx); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.addKey = req
	p := f.partner(req.PartnerId)
	k := f.newKey()
	p.Keys = append(p.Keys, &adminproto.PartnerKey{KeyId: k.KeyId, Created: k.Created})
	return &adminproto.AddKeyResponse{Partner: p, Key: k, RegistryVersion: 9}, nil
}

func (f *partnersAdmin) setStatus(ctx context.Context, id string, st adminproto.PartnerStatus) (*adminproto.PartnerChange, error) {
	if err := f.auth(ctx); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.status == nil {
		f.status = map[string]adminproto.PartnerStatus{}
	}
	f.status[id] = st
	return &adminproto.PartnerChange{Partner: f.partner(id), RegistryVersion: 10}, nil
}

func (f *partnersAdmin) SetPartnerHomeSite(ctx context.Context, req *adminproto.SetPartnerHomeSiteRequest) (*adminproto.PartnerChange, error) {
	if err := f.auth(ctx); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	p := f.partner(req.PartnerId)
	p.HomeSite = req.HomeSite
	return &adminproto.PartnerChange{Partner: p, RegistryVersion: 11}, nil
}

func (f *partnersAdmin) SuspendPartner(ctx context.Context, req *adminproto.SuspendPartnerRequest) (*adminproto.PartnerChange, error) {
	return f.setStatus(ctx, req.PartnerId, adminproto.PartnerStatus_PARTNER_STATUS_SUSPENDED)
}

func (f *partnersAdmin) ResumePartner(ctx context.Context, req *adminproto.ResumePartnerRequest) (*adminproto.PartnerChange, error) {
	return f.setStatus(ctx, req.PartnerId, adminproto.PartnerStatus_PARTNER_STATUS_ACTIVE)
}

func (f *partnersAdmin) RevokeKey(ctx context.Context, req *adminproto.RevokeKeyRequest) (*adminproto.PartnerChange, error) {
	if err := f.auth(ctx); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.revoke = req
	if !req.Force {
		return nil, status.Error(codes.FailedPrecondition, "partners: the partner's last key (force to do it anyway)")
	}
	p := f.partner(req.PartnerId)
	p.Keys = nil
	return &adminproto.PartnerChange{Partner: p, RegistryVersion: 11}, nil
}

func TestPartnersList(t *testing.T) {
	addr := serveWith(t, &partnersAdmin{})
	code, out, errs := gtrctl(t, "partners", "list", "--addr", addr, "--token", "tok")
	if code != 0 {
		t.Fatalf("code %d: %s", code, errs)
	}
	if !regexp.MustCompile(`(?m)^PARTNER +STATUS +HOME SITE +CURRENCY`).MatchString(out) || !regexp.MustCompile(`(?m)^p-001 +active +site-a +EUR`).MatchString(out) ||
		!regexp.MustCompile(`(?m)^p-002 +suspended +- +-`).MatchString(out) {
		t.Errorf("list lacks the home sites:\n%s", out)
	}
	for _, want := range []string{"registry version 7, replica r1, config store connected", "LIMITS (EFFECTIVE)",
		"p-001", "EUR", "GB,DE", "50/s, burst 50, in flight 50", "ordered: https://a.example/cb (2 signing secrets)",
		"p-002", "suspended", listedKeyID + "  p-001    2026-03-01T12:00:00Z"} {
		if !strings.Contains(out, want) {
			t.Errorf("list lacks %q:\n%s", want, out)
		}
	}
	code, out, _ = gtrctl(t, "partners", "list", "--addr", addr, "--token", "tok", "-o", "json")
	var v map[string]any
	if code != 0 || json.Unmarshal([]byte(out), &v) != nil || v["registryVersion"] != "7" {
		t.Fatalf("json: code %d %s", code, out)
	}
	if code, _, errs := gtrctl(t, "partners", "list", "--addr", addr, "--token", "wrong"); code != 1 || !strings.Contains(errs, "Unauthenticated") {
		t.Fatalf("wrong token: code %d %s", code, errs)
	}
}

func TestPartnersAddPrintsKeyOnce(t *testing.T) {
	f := &partnersAdmin{}
	addr := serveWith(t, f)
	code, out, errs := gtrctl(t, "partners", "add", "p-004", "--currency", "EUR", "--markets", "GB, DE", "--types", "CARD_AUTHORIZATION",
		"--rate", "25", "--burst", "50", "--max-in-flight", "10", "--home-site", "site-b", "--addr", addr, "--token", "tok")
	if code != 0 {
		t.Fatalf("code %d: %s", code, errs)
	}
	req := f.add
	if req.GetPartnerId() != "p-004" || req.GetSettlementCurrency() != "EUR" || strings.Join(req.GetMarkets(), "|") != "GB|DE" ||
		strings.Join(req.GetPaymentTypes(), "|") != "CARD_AUTHORIZATION" || req.GetLimits().GetRatePerSecond() != 25 ||
		req.GetLimits().GetBurst() != 50 || req.GetLimits().GetMaxInFlight() != 10 || req.GetHomeSite() != "site-b" {
		t.Fatalf("request %v", req)
	}
	key := f.keys[0]
	if strings.Count(out, key) != 1 || !strings.Contains(out, "will not be shown again") || !strings.Contains(out, "partner p-004 added (active), registry version 8") {
		t.Fatalf("output:\n%s", out)
	}
	if strings.Contains(errs, key) {
		t.Fatal("the key went to stderr")
	}
	// Without markets or types, none are sent (all allowed).
	if code, _, _ := gtrctl(t, "partners", "add", "p-005", "--addr", addr, "--token", "tok"); code != 0 || f.add.GetMarkets() != nil || f.add.GetPaymentTypes() != nil {
		t.Fatalf("add without lists: code %d, %v", code, f.add)
	}
	code, _, errs = gtrctl(t, "partners", "add", "p-001", "--addr", addr, "--token", "tok")
	if code != 1 || !strings.Contains(errs, "AlreadyExists") {
		t.Fatalf("existing partner: code %d %s", code, errs)
	}
}

func TestPartnersKeyOut(t *testing.T) {
	f := &partnersAdmin{}
	addr := serveWith(t, f)
	dir := t.TempDir()
	file := filepath.Join(dir, "p-004.key")
	code, out, errs := gtrctl(t, "partners", "add", "p-004", "-key-out", file, "--addr", addr, "--token", "tok")
	if code != 0 {
		t.Fatalf("code %d: %s", code, errs)
	}
	key := f.keys[0]
	if strings.Contains(out, key) || strings.Contains(errs, key) || !strings.Contains(out, "written to "+file) || !strings.Contains(out, "will not be shown again") {
		t.Fatalf("with --key-out the key must not be printed:\n%s%s", out, errs)
	}
	st, err := os.Stat(file)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("key file: %v %v", st, err)
	}
	if got, err := partners.ReadKeyFile(file); err != nil || got != key {
		t.Fatalf("key file holds %q (%v)", got, err)
	}

	// add-key with -o json and --key-out: the JSON carries no key.
	file2 := filepath.Join(dir, "p-004-2.key")
	code, out, errs = gtrctl(t, "partners", "add-key", "p-004", "--key-out", file2, "-o", "json", "--addr", addr, "--token", "tok")
	if code != 0 || strings.Contains(out, f.keys[1]) || strings.Contains(errs, f.keys[1]) {
		t.Fatalf("add-key json with --key-out: code %d\n%s%s", code, out, errs)
	}
	if got, _ := partners.ReadKeyFile(file2); got != f.keys[1] {
		t.Fatal("add-key --key-out did not write the key")
	}

	// An unwritable --key-out is refused before any key is made.
	n := len(f.keys)
	code, _, errs = gtrctl(t, "partners", "add-key", "p-004", "--key-out", filepath.Join(dir, "no", "such", "dir", "k"), "--addr", addr, "--token", "tok")
	if code != 1 || len(f.keys) != n || !strings.Contains(errs, "--key-out") {
		t.Fatalf("unwritable --key-out: code %d, %d keys made: %s", code, len(f.keys)-n, errs)
	}
}

func TestPartnersAddKeyPrintsKeyOnce(t *testing.T) {
	f := &partnersAdmin{}
	addr := serveWith(t, f)
	code, out, errs := gtrctl(t, "partners", "add-key", "p-001", "--addr", addr, "--token", "tok")
	if code != 0 || f.addKey.GetPartnerId() != "p-001" {
		t.Fatalf("code %d %v: %s", code, f.addKey, errs)
	}
	if strings.Count(out, f.keys[0]) != 1 || !strings.Contains(out, "will not be shown again") || !strings.Contains(out, "2 keys") {
		t.Fatalf("output:\n%s", out)
	}
	code, out, errs = gtrctl(t, "partners", "add-key", "p-001", "-o", "json", "--addr", addr, "--token", "tok")
	var v struct {
		Key struct {
			APIKey string `json:"apiKey"`
		} `json:"key"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &v) != nil || v.Key.APIKey != f.keys[1] || !strings.Contains(errs, "will not be shown again") {
		t.Fatalf("json: code %d\n%s%s", code, out, errs)
	}
}

func TestPartnersSuspendResumeRevoke(t *testing.T) {
	f := &partnersAdmin{}
	addr := serveWith(t, f)
	code, out, errs := gtrctl(t, "partners", "suspend", "p-001", "--addr", addr, "--token", "tok")
	if code != 0 || !strings.Contains(out, "partner p-001: suspended") {
		t.Fatalf("suspend: code %d\n%s%s", code, out, errs)
	}
	code, out, _ = gtrctl(t, "partners", "resume", "p-001", "--addr", addr, "--token", "tok")
	if code != 0 || !strings.Contains(out, "partner p-001: active") {
		t.Fatalf("resume: code %d\n%s", code, out)
	}
	code, out, errs = gtrctl(t, "partners", "set-home-site", "p-001", "site-b", "--addr", addr, "--token", "tok")
	if code != 0 || !strings.Contains(out, "partner p-001: active, 1 keys, home site site-b, registry version 11") {
		t.Fatalf("set-home-site: code %d\n%s%s", code, out, errs)
	}
	code, out, errs = gtrctl(t, "partners", "set-home-site", "p-001", "--addr", addr, "--token", "tok")
	if code != 0 || strings.Contains(out, "home site") {
		t.Fatalf("set-home-site with no site: code %d\n%s%s", code, out, errs)
	}
	code, _, errs = gtrctl(t, "partners", "revoke-key", "p-001", listedKeyID, "--addr", addr, "--token", "tok")
	if code != 1 || !strings.Contains(errs, "FailedPrecondition") || f.revoke.GetForce() || f.revoke.GetKeyId() != listedKeyID {
		t.Fatalf("revoke the last key: code %d %v %s", code, f.revoke, errs)
	}
	code, out, errs = gtrctl(t, "partners", "revoke-key", "--force", "p-001", listedKeyID, "--addr", addr, "--token", "tok")
	if code != 0 || !f.revoke.GetForce() || !strings.Contains(out, "0 keys") {
		t.Fatalf("forced revoke: code %d %v\n%s%s", code, f.revoke, out, errs)
	}
}

func TestPartnersUsage(t *testing.T) {
	for _, args := range [][]string{{"partners"}, {"partners", "nope"}, {"partners", "add"}, {"partners", "add", "a", "b"},
		{"partners", "suspend"}, {"partners", "revoke-key", "p-001"}, {"partners", "list", "extra"}} {
		if code, _, _ := gtrctl(t, args...); code != 2 {
			t.Errorf("%v: code %d, want 2", args, code)
		}
	}
}
