package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/cellpay/cellpay/pkg/adminproto"
)

type auditAdmin struct {
	fakeAdmin
	req *adminproto.ListAuditRequest
}

func (f *auditAdmin) ListAudit(ctx context.Context, req *adminproto.ListAuditRequest) (*adminproto.ListAuditResponse, error) {
	if err := f.auth(ctx); err != nil {
		return nil, err
	}
	f.req = req
	return &adminproto.ListAuditResponse{Records: []*adminproto.AuditRecord{
		{Time: timestamppb.Now(), Actor: "otto", Role: "operator", Method: "Drain", Outcome: "OK",
			Before: `{"cell":"cell-b","weight":100}`, After: `{"cell":"cell-b","weight":70}`},
		{Time: timestamppb.Now(), Actor: "vera", Role: "viewer", Method: "Drain", Outcome: "PermissionDenied", Error: "Drain needs role operator"},
	}}, nil
}

// TestAudit: gtrctl audit sends --since and --limit and prints actor,
// call and before -> after; with no credential given it uses a local
// platform's admin token file.
func TestAudit(t *testing.T) {
	f := &auditAdmin{}
	addr := serveWith(t, f)
	data := t.TempDir()
	os.MkdirAll(filepath.Join(data, "operators"), 0o700)
	os.WriteFile(filepath.Join(data, "operators", "admin.token"), []byte("tok\n"), 0o600)
	t.Setenv("CELLPAY_DATA", data)
	t.Setenv("GTR_ADMIN_TOKEN", "")
	t.Setenv("GTR_ADMIN_TOKEN_FILE", "")
	t.Setenv("GTRCTL_TOKEN_FILE", "")
	code, out, errs := gtrctl(t, "audit", "--since", "1h", "--limit", "5", "--addr", addr)
	if code != 0 {
		t.Fatalf("code %d: %s", code, errs)
	}
	for _, want := range []string{"otto", `{"cell":"cell-b","weight":100} -> {"cell":"cell-b","weight":70}`, "Drain needs role operator"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if f.req.GetLimit() != 5 || time.Since(f.req.GetSince().AsTime()) < 59*time.Minute {
		t.Fatalf("request %v", f.req)
	}
	// protojson varies its whitespace on purpose: decode, do not match text.
	code, out, _ = gtrctl(t, "audit", "-o", "json", "--addr", addr)
	var got struct {
		Records []struct{ Actor string } `json:"records"`
	}
	if err := json.Unmarshal([]byte(out), &got); code != 0 || err != nil || len(got.Records) == 0 || got.Records[0].Actor != "otto" {
		t.Fatalf("-o json: %d %v\n%s", code, err, out)
	}
	os.Remove(filepath.Join(data, "operators", "admin.token"))
	if code, _, errs := gtrctl(t, "audit", "--addr", addr); code != 1 || !strings.Contains(errs, "Unauthenticated") {
		t.Fatalf("without the default token file: %d %s", code, errs)
	}
}
