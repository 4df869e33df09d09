package main

import (
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/cellpay/cellpay/internal/dev/platform"
)

// TestConfigureTwoSites: -sites 2 lays the platform out as two sites on
// their own loopback addresses with the single-site ports, routed by the
// two-site table, and refuses the flags it sets itself, naming them.
func TestConfigureTwoSites(t *testing.T) {
	cfg, err := configure([]string{"-sites", "2"})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.GTRAddr != "127.0.1.1:7070" || cfg.AdminAddr != "127.0.1.1:7071" || cfg.BackupGTRAddr != "127.0.2.1:7070" ||
		cfg.BackupAdminAddr != "127.0.2.1:7071" || cfg.RESTAddr != "127.0.1.1:7060" || cfg.BackupRESTAddr != "127.0.2.1:7060" {
		t.Errorf("access points %s %s %s %s %s %s", cfg.GTRAddr, cfg.AdminAddr, cfg.BackupGTRAddr, cfg.BackupAdminAddr, cfg.RESTAddr, cfg.BackupRESTAddr)
	}
	if cfg.GTRSite != "site-a" || cfg.BackupGTRSite != "site-b" || cfg.NoBackupGTR || cfg.GTRConfig != platform.TwoSitesGTRConfig {
		t.Errorf("sites %q %q, backup off %v, config %s", cfg.GTRSite, cfg.BackupGTRSite, cfg.NoBackupGTR, cfg.GTRConfig)
	}
	if !slices.Equal(cfg.Cells, platform.TwoSitesCells) {
		t.Errorf("cells %v", cfg.Cells)
	}
	// The table names the cells where the platform starts them.
	table, err := os.ReadFile(filepath.Join("..", "..", platform.TwoSitesGTRConfig))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range platform.TwoSitesCells {
		if !strings.Contains(string(table), `{id: `+c.ID+`, addrs: ["`+c.Addr+`"`) {
			t.Errorf("%s: %s is not its first address in %s", c.ID, c.Addr, platform.TwoSitesGTRConfig)
		}
	}
	if cfg, err := configure([]string{"-sites", "2", "-config", "mine.yaml"}); err != nil || cfg.GTRConfig != "mine.yaml" {
		t.Errorf("-config with -sites 2: %q, %v", cfg.GTRConfig, err)
	}
	for _, args := range [][]string{{"-sites", "2", "-cells", "cell-a=127.0.0.1:7081"}, {"-sites", "2", "-gtr-addr", "127.0.0.1:1"}, {"-sites", "2", "-backup-gtr=false"}} {
		if _, err := configure(args); err == nil || !strings.Contains(err.Error(), args[2][:strings.IndexAny(args[2]+"=", "=")]) {
			t.Errorf("%v: %v, want a refusal naming %s", args, err, args[2])
		}
	}
	t.Setenv("CELLPAY_ADMIN_ADDR", "127.0.0.1:1")
	if _, err := configure([]string{"-sites", "2"}); err == nil || !strings.Contains(err.Error(), "CELLPAY_ADMIN_ADDR") {
		t.Errorf("an address in the environment: %v", err)
	}
	if _, err := configure([]string{"-sites", "3"}); err == nil || !strings.Contains(err.Error(), "-sites") {
		t.Errorf("-sites 3: %v", err)
	}
}

// TestFreezeSite: a site of a two-site platform is its access point and
// every instance of the cells on its address; a single-site platform's
// site is not a target, nor is an unknown name.
func TestFreezeSite(t *testing.T) {
	ri := platform.RunInfo{
		GTRAddr: "127.0.1.1:7070", BackupGTRAddr: "127.0.2.1:7070", GTRSite: "site-a", BackupGTRSite: "site-b",
		Cells: []platform.RunCell{
			{ID: "cell-a", Addr: "127.0.1.1:7081", Instances: []string{"127.0.1.1:7081", "127.0.1.1:7181"}},
			{ID: "cell-c", Addr: "127.0.2.1:7081", Instances: []string{"127.0.2.1:7081", "127.0.2.1:7181"}},
			{ID: "cell-d", Addr: "127.0.2.1:7082", Instances: []string{"127.0.2.1:7082", "127.0.2.1:7182"}},
		},
		PIDs: map[string]int{"gtr": 10, "gtr-backup": 11, "cell-a": 12, "cell-a-2": 13, "cell-c": 14, "cell-c-2": 15, "cell-d": 16, "cell-d-2": 17},
	}
	creds := grpc.WithTransportCredentials(insecure.NewCredentials())
	var asked []string
	cellTLS := func(cell string) (grpc.DialOption, error) { asked = append(asked, cell); return creds, nil }
	tg, err := freezeTarget(ri, "site-b", creds, cellTLS)
	if err != nil {
		t.Fatal(err)
	}
	if tg.Endpoint != ri.BackupGTRAddr || !strings.Contains(tg.Name, "site site-b (127.0.2.1: access point 127.0.2.1:7070, cells cell-c, cell-d)") {
		t.Errorf("target %q at %s", tg.Name, tg.Endpoint)
	}
	if !slices.Equal(asked, []string{"cell-c", "cell-d"}) {
		t.Errorf("cells' credentials asked for %v", asked)
	}
	if tg, err := freezeTarget(ri, "site-a", creds, cellTLS); err != nil || tg.Endpoint != ri.GTRAddr || !strings.Contains(tg.Name, "cells cell-a)") {
		t.Errorf("site-a: %q, %v", tg.Name, err)
	}
	delete(ri.PIDs, "cell-d-2")
	if _, err := freezeTarget(ri, "site-b", creds, cellTLS); err == nil || !strings.Contains(err.Error(), "cell-d-2 is not running") {
		t.Errorf("a process of the site gone: %v", err)
	}
	ri.BackupGTRSite = "site-a"
	for _, name := range []string{"site-a", "nowhere"} {
		if _, err := freezeTarget(ri, name, creds, cellTLS); err == nil {
			t.Errorf("%s is a target of a single-site platform", name)
		}
	}
}

// TestParseDrillBudget: a partner's budget for a transaction leaves room
// for a retry past one call's read timeout, or the drill refuses it by
// its flag's name.
func TestParseDrillBudget(t *testing.T) {
	o, err := parseDrill([]string{"-cut", "primary"}, io.Discard)
	if err != nil || o.requestTO != 30*time.Second || o.callTO != time.Second {
		t.Fatalf("defaults: %v, %v, %v", o.requestTO, o.callTO, err)
	}
	var stderr strings.Builder
	if _, err := parseDrill([]string{"-cut", "primary", "-call-timeout", "2s", "-request-timeout", "2s"}, &stderr); err == nil || !strings.Contains(stderr.String(), "-request-timeout") {
		t.Fatalf("a budget of one call's timeout: %v, %q", err, stderr.String())
	}
}
