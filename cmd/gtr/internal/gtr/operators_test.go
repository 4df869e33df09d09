package gtr

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/cellpay/cellpay/cmd/gtr/internal/admin"
	"github.com/cellpay/cellpay/internal/dev/testutil"
	"github.com/cellpay/cellpay/internal/operators"
	"github.com/cellpay/cellpay/pkg/adminproto"
	"github.com/cellpay/cellpay/pkg/client"
)

// TestOperatorsFileReloads: operators added to and removed from the
// operators file are let in and turned away without a restart; a file
// that no longer loads leaves the operators in force.
func TestOperatorsFileReloads(t *testing.T) {
	dir := t.TempDir()
	cfgFile := filepath.Join(dir, "gtr.yaml")
	if err := os.WriteFile(cfgFile, []byte("version: 1\ncells:\n  - {id: cell-a, addr: \"127.0.0.1:1\", pool: main}\nrules:\n  - {name: all, pool: main}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	opsFile := filepath.Join(dir, "operators.yaml")
	token := func(id string) (string, operators.Operator) {
		tok, op, err := operators.NewToken(nil, id, operators.RoleViewer)
		if err != nil {
			t.Fatal(err)
		}
		return tok, op
	}
	alice, aliceOp := token("alice")
	bob, bobOp := token("bob")
	if err := operators.WriteFile(opsFile, &operators.File{Operators: []operators.Operator{aliceOp}}); err != nil {
		t.Fatal(err)
	}
	cert, key, ca := testTLS(t)
	cfg := Config{Listen: "127.0.0.1:0", AdminListen: "127.0.0.1:0", ConfigFile: cfgFile, OperatorsFile: opsFile,
		OperatorsRefresh: 50 * time.Millisecond, AuditFile: filepath.Join(dir, "audit.jsonl"),
		StateFile: filepath.Join(dir, "state.json"), ReplicaID: "r1", ShutdownTimeout: time.Second,
		TLSCertFile: cert, TLSKeyFile: key, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	g := startGTR(t, cfg)
	tlsOpt, err := client.TLS(ca)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(g.AdminAddr().String(), tlsOpt)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	adm := adminproto.NewAdminClient(conn)
	as := func(tok string) codes.Code {
		cctx, ccancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer ccancel()
		_, err := adm.ListCells(cctx, &adminproto.ListCellsRequest{}, grpc.PerRPCCredentials(admin.TokenCredentials(tok)), grpc.WaitForReady(true))
		return status.Code(err)
	}
	if got := as(alice); got != codes.OK {
		t.Fatalf("alice at start: %v", got)
	}
	if got := as(bob); got != codes.Unauthenticated {
		t.Fatalf("bob before he is added: %v", got)
	}
	if err := operators.WriteFile(opsFile, &operators.File{Operators: []operators.Operator{bobOp}}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 5*time.Second, "bob in, alice out", func() bool { return as(bob) == codes.OK && as(alice) == codes.Unauthenticated })

	if err := os.WriteFile(opsFile, []byte("operators: [{id: \"not valid!\"}]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond) // six refreshes
	if got := as(bob); got != codes.OK {
		t.Fatalf("bob after a broken file: %v; want the operators in force kept", got)
	}
}
