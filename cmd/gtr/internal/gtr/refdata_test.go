package gtr

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"google.golang.org/grpc"

	"github.com/cellpay/cellpay/cmd/gtr/internal/admin"
	"github.com/cellpay/cellpay/internal/refdata"
	"github.com/cellpay/cellpay/pkg/adminproto"
	"github.com/cellpay/cellpay/pkg/client"
)

// TestRefdataVersionsFromNATS: with a NATS URL the GTR follows the cells'
// status reports, and ListCells and Explain show them.
func TestRefdataVersionsFromNATS(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: port, JetStream: true, StoreDir: t.TempDir(), NoSigs: true, NoLog: true})
	if err != nil {
		t.Fatal(err)
	}
	ns.Start()
	t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	if !ns.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats not ready")
	}
	url := "nats://127.0.0.1:" + strconv.Itoa(port)

	dir := t.TempDir()
	cfgFile := filepath.Join(dir, "gtr.yaml")
	if err := os.WriteFile(cfgFile, []byte("version: 1\ncells:\n  - {id: cell-a, addr: \"127.0.0.1:1\", pool: main}\n"+
		"rules:\n  - {name: fresh, pool: main, min_refdata_version: 2}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cert, key, ca := testTLS(t)
	cfg := Config{Listen: freeAddr(t), AdminListen: freeAddr(t), ConfigFile: cfgFile, AdminToken: "tok",
		TLSCertFile: cert, TLSKeyFile: key, NATSURL: url, ReplicaID: "r1", ShutdownTimeout: time.Second,
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	runGTR(t, cfg)
	tlsOpt, err := client.TLS(ca)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(cfg.AdminListen, tlsOpt, grpc.WithPerRPCCredentials(admin.TokenCredentials("tok")))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	adm := adminproto.NewAdminClient(conn)
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()

	cctx, ccancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer ccancel()
	attrs := &adminproto.Attrs{PartnerId: "p-1", Market: "GB", PaymentType: "CARD_AUTHORIZATION"}
	for {
		// Reports are published until the GTR (which may still be
		// starting) has heard one, as cells do every second.
		b, _ := json.Marshal(refdata.Status{Cell: "cell-a", Version: 2, Source: "nats"})
		if err := nc.Publish(refdata.StatusSubjectPrefix+"cell-a", b); err != nil {
			t.Fatal(err)
		}
		list, err := adm.ListCells(cctx, &adminproto.ListCellsRequest{}, grpc.WaitForReady(true))
		if err == nil && len(list.Cells) == 1 && list.Cells[0].RefdataVersion == 2 {
			break
		}
		select {
		case <-cctx.Done():
			t.Fatalf("the GTR never heard cell-a's report: %v %v", list, err)
		case <-time.After(100 * time.Millisecond):
		}
	}
	e, err := adm.Explain(cctx, &adminproto.ExplainRequest{Attrs: attrs})
	if err != nil || e.Error != "" || e.Cells[0].Rank != 1 {
		t.Fatalf("explain with cell-a at v2: %v %v", e, err)
	}
}
