package gtr

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"google.golang.org/grpc"

	"github.com/cellpay/cellpay/cmd/gtr/internal/admin"
	"github.com/cellpay/cellpay/internal/dev/testutil/natstest"
	"github.com/cellpay/cellpay/internal/refdata"
	"github.com/cellpay/cellpay/pkg/adminproto"
	"github.com/cellpay/cellpay/pkg/client"
)

// TestRefdataVersionsFromNATS: with a NATS URL the GTR follows the cells'
// status reports, and ListCells and Explain show them.
func TestRefdataVersionsFromNATS(t *testing.T) {
	url := natstest.Start(t).URL()

	dir := t.TempDir()
	cfgFile := filepath.Join(dir, "gtr.yaml")
	if err := os.WriteFile(cfgFile, []byte("version: 1\ncells:\n  - {id: cell-a, addr: \"127.0.0.1:1\", pool: main}\n"+
		"rules:\n  - {name: fresh, pool: main, min_refdata_version: 2}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cert, key, ca := testTLS(t)
	cfg := Config{Listen: "127.0.0.1:0", AdminListen: "127.0.0.1:0", ConfigFile: cfgFile, AdminToken: "tok",
		TLSCertFile: cert, TLSKeyFile: key, NATSURL: url, ReplicaID: "r1", ShutdownTimeout: time.Second,
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	g := startGTR(t, cfg)
	tlsOpt, err := client.TLS(ca)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(g.AdminAddr().String(), tlsOpt, grpc.WithPerRPCCredentials(admin.TokenCredentials("tok")))
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
