package admin

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/cellpay/cellpay/internal/operators"
	"github.com/cellpay/cellpay/pkg/adminproto"
)

// fakeReleaser records the release records written.
type fakeReleaser struct {
	cells   []string
	records [][]byte
	err     error
}

func (f *fakeReleaser) Release(_ context.Context, cell string, record []byte) (uint64, error) {
	if f.err != nil {
		return 0, f.err
	}
	f.cells, f.records = append(f.cells, cell), append(f.records, record)
	return 42, nil
}

// TestReleaseCell: a release needs a cell ID and a reason, names the field
// it refuses, writes the record through the Releaser and answers its
// revision; without a directory it is unimplemented, and it is the admin
// role's alone.
func TestReleaseCell(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	ctx := context.Background()
	if _, err := (&Server{cfg: Config{Log: log}}).ReleaseCell(ctx, &adminproto.ReleaseCellRequest{CellId: "cell-a", Reason: "gone"}); status.Code(err) != codes.Unimplemented {
		t.Fatalf("without a directory: %v, want UNIMPLEMENTED", err)
	}
	rel := &fakeReleaser{}
	s := &Server{cfg: Config{Releaser: rel, ReplicaID: "gtr-1", Log: log}}
	for _, bad := range []struct {
		req   *adminproto.ReleaseCellRequest
		field string
	}{
		{&adminproto.ReleaseCellRequest{Reason: "gone"}, "cell_id"},
		{&adminproto.ReleaseCellRequest{CellId: "cell.a", Reason: "gone"}, "cell_id"},
		{&adminproto.ReleaseCellRequest{CellId: "cell-a>", Reason: "gone"}, "cell_id"},
		{&adminproto.ReleaseCellRequest{CellId: "cell-a"}, "reason"},
		{&adminproto.ReleaseCellRequest{CellId: "cell-a", Reason: strings.Repeat("x", maxReason+1)}, "reason"},
	} {
		_, err := s.ReleaseCell(ctx, bad.req)
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), bad.field) {
			t.Errorf("%v: %v, want INVALID_ARGUMENT naming %s", bad.req, err, bad.field)
		}
	}
	if len(rel.cells) != 0 {
		t.Fatalf("refused releases were written: %v", rel.cells)
	}
	resp, err := s.ReleaseCell(ctx, &adminproto.ReleaseCellRequest{CellId: "cell-a", Reason: "data centre flooded"})
	if err != nil || resp.GetRevision() != 42 || resp.GetCellId() != "cell-a" {
		t.Fatalf("release: %v, %v", resp, err)
	}
	var rec releaseRecord
	if len(rel.records) != 1 || json.Unmarshal(rel.records[0], &rec) != nil || rec.Cell != "cell-a" || rec.Reason != "data centre flooded" || rec.Replica != "gtr-1" || rec.Released.IsZero() {
		t.Fatalf("record written: %s", rel.records)
	}
	rel.err = errors.New("nats: timeout")
	if _, err := s.ReleaseCell(ctx, &adminproto.ReleaseCellRequest{CellId: "cell-b", Reason: "gone"}); status.Code(err) != codes.Unavailable {
		t.Fatalf("directory down: %v, want UNAVAILABLE", err)
	}
	if policy["ReleaseCell"] != operators.RoleAdmin {
		t.Fatalf("ReleaseCell needs %v, want admin", policy["ReleaseCell"])
	}
}
