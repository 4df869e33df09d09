package gtr

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/cellpay/cellpay/cmd/gtr/internal/admin"
	"github.com/cellpay/cellpay/internal/partners"
	"github.com/cellpay/cellpay/pkg/adminproto"
	"github.com/cellpay/cellpay/pkg/client"
)

// TestPartnersWired: the GTR starts its partner registry from -partners,
// serves the partner RPCs on the admin listener only, and keeps changes in
// -partners-state-file, which a restart starts from.
func TestPartnersWired(t *testing.T) {
	dir := t.TempDir()
	cfgFile := filepath.Join(dir, "gtr.yaml")
	os.WriteFile(cfgFile, []byte("version: 1\ncells:\n  - {id: cell-a, addr: \"127.0.0.1:1\", pool: main}\nrules:\n  - {name: all, pool: main}\n"), 0o644)
	partnersFile := filepath.Join(dir, "partners.yaml")
	os.WriteFile(partnersFile, []byte("version: 4\npartners:\n  - {id: p-001, status: active}\n"), 0o644)
	tlsCert, tlsKey, caFile := testTLS(t)
	cfg := Config{Listen: "127.0.0.1:0", AdminListen: "127.0.0.1:0", ConfigFile: cfgFile, AdminToken: "tok",
		TLSCertFile: tlsCert, TLSKeyFile: tlsKey, PartnersFile: partnersFile, PartnersStateFile: filepath.Join(dir, "partners-state.json"),
		AuditFile: filepath.Join(dir, "audit.jsonl"), ReplicaID: "r1", ShutdownTimeout: time.Second, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	cctx, ccancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer ccancel()

	run := func(body func(adm, pub adminproto.AdminClient)) {
		t.Helper()
		g, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if err := g.Start(cctx); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { g.Shutdown(context.Background()) }) // if body fails; a no-op after the one below
		dial := func(addr string) *grpc.ClientConn {
			tlsOpt, err := client.TLS(caFile)
			if err != nil {
				t.Fatal(err)
			}
			conn, err := grpc.NewClient(addr, tlsOpt, grpc.WithPerRPCCredentials(admin.TokenCredentials("tok")))
			if err != nil {
				t.Fatal(err)
			}
			return conn
		}
		ac, pc := dial(g.AdminAddr().String()), dial(g.Addr().String())
		if _, err := healthpb.NewHealthClient(ac).Check(cctx, &healthpb.HealthCheckRequest{}, grpc.WaitForReady(true)); err != nil {
			t.Fatal(err)
		}
		body(adminproto.NewAdminClient(ac), adminproto.NewAdminClient(pc))
		ac.Close()
		pc.Close()
		if err := g.Shutdown(cctx); err != nil {
			t.Fatal(err)
		}
	}

	var key string
	run(func(adm, pub adminproto.AdminClient) {
		list, err := adm.ListPartners(cctx, &adminproto.ListPartnersRequest{})
		if err != nil || list.GetRegistryVersion() != 4 || len(list.GetPartners()) != 1 || list.GetPartners()[0].GetId() != "p-001" {
			t.Fatalf("list from -partners: %v %v", list, err)
		}
		if _, err := pub.ListPartners(cctx, &adminproto.ListPartnersRequest{}); status.Code(err) != codes.Unimplemented {
			t.Fatalf("partner RPCs on the partners' port: %v, want Unimplemented", err)
		}
		ak, err := adm.AddKey(cctx, &adminproto.AddKeyRequest{PartnerId: "p-001"})
		if err != nil {
			t.Fatal(err)
		}
		key = ak.GetKey().GetApiKey()
		// The change is audited, as legacy-admin, and the audit never
		// holds the key the answer carried.
		au, err := adm.ListAudit(cctx, &adminproto.ListAuditRequest{})
		if err != nil || len(au.GetRecords()) != 1 || au.GetRecords()[0].GetMethod() != "AddKey" || au.GetRecords()[0].GetActor() != "legacy-admin" {
			t.Fatalf("audit: %v, %v", au, err)
		}
		if b, _ := os.ReadFile(cfg.AuditFile); !strings.Contains(string(b), partners.KeyID(key)) || strings.Contains(string(b), key) {
			t.Fatalf("audit file: want the key ID and never the key:\n%s", b)
		}
	})
	// The restart starts from the state file, not from -partners.
	run(func(adm, _ adminproto.AdminClient) {
		list, err := adm.ListPartners(cctx, &adminproto.ListPartnersRequest{})
		if err != nil || list.GetRegistryVersion() != 5 || len(list.GetPartners()[0].GetKeys()) != 1 ||
			list.GetPartners()[0].GetKeys()[0].GetKeyId() != partners.KeyID(key) {
			t.Fatalf("list after a restart: %v %v", list, err)
		}
	})
}
