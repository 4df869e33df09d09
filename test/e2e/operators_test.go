package e2e

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/cellpay/cellpay/internal/operators"
	"github.com/cellpay/cellpay/pkg/adminproto"
)

// gtrctlAs runs the built gtrctl against the platform's GTR with the token
// file of role (RoleNone: no credential at all, and no default one either),
// and returns its exit code, stdout and stderr.
func gtrctlAs(t *testing.T, role operators.Role, args ...string) (int, string, string) {
	t.Helper()
	return gtrctlAt(t, env.p.Config().AdminAddr, role, args...)
}

// auditSince reads, as a viewer through gtrctl audit -o json, the audit
// records since start of the GTR whose admin API is at addr; with gtrctl's
// output.
func auditSince(t *testing.T, addr string, start time.Time) (auditJSON, string) {
	t.Helper()
	code, out, errs := gtrctlAt(t, addr, operators.RoleViewer, "audit", "-o", "json", "--since", start.Format(time.RFC3339Nano))
	if code != 0 {
		t.Fatalf("gtrctl audit: %s", errs)
	}
	var au auditJSON
	if err := json.Unmarshal([]byte(out), &au); err != nil {
		t.Fatalf("gtrctl audit -o json: %v\n%s", err, out)
	}
	return au, out
}

// gtrctlAt is gtrctlAs against the GTR whose admin API is at addr.
func gtrctlAt(t *testing.T, addr string, role operators.Role, args ...string) (int, string, string) {
	t.Helper()
	cmd := exec.Command(filepath.Join(env.bin, "gtrctl"), args...)
	cmd.Dir = t.TempDir() // no .cellpay here: no default credential
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "GTR_ADMIN_") && !strings.HasPrefix(kv, "GTRCTL_") && !strings.HasPrefix(kv, "CELLPAY_DATA=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, "GTR_ADMIN_ADDR="+addr, "GTRCTL_CA="+env.p.CAFile())
	if role != operators.RoleNone {
		cmd.Env = append(cmd.Env, "GTRCTL_TOKEN_FILE="+env.p.OperatorTokenFile(role))
	}
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return code, out.String(), errOut.String()
}

// targetWeight is cell id's configured weight on the platform's GTR.
func targetWeight(t *testing.T, adm adminproto.AdminClient, id string) int32 {
	t.Helper()
	resp, err := adm.ListCells(ctxFor(t, 10*time.Second), &adminproto.ListCellsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range resp.GetCells() {
		if c.GetId() == id {
			return c.GetTargetWeight()
		}
	}
	t.Fatalf("no cell %s", id)
	return 0
}

type auditJSON struct {
	Records []struct {
		Actor, Role, Method, Outcome, Error, Replica string
		Time                                         time.Time
		Before, After, Request                       string
	}
}

// TestOperatorRolesAndAudit: with the credentials make run provisions, a
// viewer cannot drain (and nothing drains), an operator can, but cannot
// apply a table; no token or a garbage one is UNAUTHENTICATED; and every
// change and refusal is in gtrctl audit, with its actor, time, before and
// after, and in the CELLPAY_AUDIT stream.
func TestOperatorRolesAndAudit(t *testing.T) {
	const cell = "cell-b"
	adm := platformAdmin(t)
	w0 := targetWeight(t, adm, cell)
	if w0 < 10 {
		t.Fatalf("%s weight %d: want a cell with weight to drain", cell, w0)
	}
	t.Cleanup(func() { gtrctlAs(t, operators.RoleAdmin, "restore", cell, "--no-wait") })
	start := time.Now().Add(-time.Second)

	if code, out, errs := gtrctlAs(t, operators.RoleViewer, "cells"); code != 0 || !strings.Contains(out, cell) {
		t.Fatalf("viewer cells: %d %s %s", code, out, errs)
	}
	code, _, errs := gtrctlAs(t, operators.RoleViewer, "drain", cell, "--percent", "30", "--no-wait")
	if code != 1 || !strings.Contains(errs, "PermissionDenied") || !strings.Contains(errs, "needs role operator") {
		t.Fatalf("viewer drain: code %d, %s", code, errs)
	}
	if w := targetWeight(t, adm, cell); w != w0 {
		t.Fatalf("%s weight %d after a viewer's refused drain, want %d", cell, w, w0)
	}
	if code, _, errs := gtrctlAs(t, operators.RoleOperator, "drain", cell, "--percent", "30", "--no-wait"); code != 0 {
		t.Fatalf("operator drain: %d %s", code, errs)
	}
	drained := w0 - w0*30/100
	if w := targetWeight(t, adm, cell); w != drained {
		t.Fatalf("%s weight %d after the operator's drain, want %d", cell, w, drained)
	}
	code, table, errs := gtrctlAs(t, operators.RoleOperator, "table", "get")
	if code != 0 {
		t.Fatalf("operator table get: %s", errs)
	}
	file := filepath.Join(t.TempDir(), "table.yaml")
	if err := os.WriteFile(file, []byte(table), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, _, errs := gtrctlAs(t, operators.RoleOperator, "table", "apply", "-f", file, "--dry-run"); code != 1 || !strings.Contains(errs, "needs role admin") {
		t.Fatalf("operator table apply: code %d, %s", code, errs)
	}
	if code, _, errs := gtrctlAs(t, operators.RoleNone, "cells"); code != 1 || !strings.Contains(errs, "Unauthenticated") {
		t.Fatalf("no token: code %d, %s", code, errs)
	}
	if code, _, errs := gtrctlAs(t, operators.RoleNone, "cells", "--token", "cpo_admin_"+strings.Repeat("0", 64)); code != 1 || !strings.Contains(errs, "Unauthenticated") {
		t.Fatalf("garbage token: code %d, %s", code, errs)
	}
	if code, _, errs := gtrctlAs(t, operators.RoleOperator, "restore", cell, "--no-wait"); code != 0 {
		t.Fatalf("operator restore: %s", errs)
	}

	au, out := auditSince(t, env.p.Config().AdminAddr, start)
	var got []string
	weights := map[string][2]int32{}
	for _, r := range au.Records {
		if r.Time.Before(start) || r.Time.After(time.Now()) {
			t.Errorf("record time %v outside the test", r.Time)
		}
		if !strings.Contains(r.Request, cell) && r.Method != "ApplyTable" {
			continue // another test's change
		}
		got = append(got, r.Actor+" "+r.Method+" "+r.Outcome)
		if r.Outcome == "OK" {
			var before, after struct{ Weight int32 }
			json.Unmarshal([]byte(r.Before), &before)
			json.Unmarshal([]byte(r.After), &after)
			weights[r.Method] = [2]int32{before.Weight, after.Weight}
		}
	}
	want := "viewer Drain PermissionDenied; operator Drain OK; operator ApplyTable PermissionDenied; operator Restore OK"
	if strings.Join(got, "; ") != want {
		t.Fatalf("audit:\n got %s\nwant %s\n%s", strings.Join(got, "; "), want, out)
	}
	if weights["Drain"] != [2]int32{w0, drained} || weights["Restore"] != [2]int32{drained, w0} {
		t.Fatalf("before -> after: %v; want Drain %d -> %d, Restore back", weights, w0, drained)
	}
	if code, out, _ := gtrctlAs(t, operators.RoleViewer, "audit", "--since", start.Format(time.RFC3339Nano), "--limit", "50"); code != 0 ||
		!strings.Contains(out, "operator") || !strings.Contains(out, "->") || !strings.Contains(out, "needs role operator") {
		t.Fatalf("gtrctl audit:\n%s", out)
	}

	// The records are in the durable stream, not just in the GTR.
	natsOpts, err := env.p.NATSOptions()
	if err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(env.p.NATSURL(), natsOpts...)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx := ctxFor(t, 10*time.Second)
	st, err := js.Stream(ctx, "CELLPAY_AUDIT")
	if err != nil {
		t.Fatal(err)
	}
	msg, err := st.GetLastMsgForSubject(ctx, "cellpay.audit.gtr")
	if err != nil || !strings.Contains(string(msg.Data), `"method":"Restore"`) || !strings.Contains(string(msg.Data), `"actor":"operator"`) {
		t.Fatalf("last audit record in the stream: %v, %v", msg, err)
	}
}
