package main

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/cellpay/cellpay/pkg/adminproto"
)

// siteAdmin is the fake Admin server of the site commands: site-a has
// cell-a1 (table weight 100) and cell-a2 (table weight 80); a ramped
// change ramps for two polls of ListCells.
type siteAdmin struct {
	*fakeAdmin
	mu       sync.Mutex
	evacuate *adminproto.EvacuateSiteRequest
	restore  *adminproto.RestoreSiteRequest
	polls    int
	ramping  bool
	target   map[string]int32 // each cell's weight once the change is made
}

var siteTable = map[string]int32{"cell-a1": 100, "cell-a2": 80}

// cells is site-a's cells at weights w (ramping from their table
// weights, or to them from 0, while s.ramping).
func (s *siteAdmin) cells(w map[string]int32, ramp bool) []*adminproto.CellStatus {
	var out []*adminproto.CellStatus
	for _, id := range []string{"cell-a1", "cell-a2"} {
		cs := &adminproto.CellStatus{Id: id, Pool: "main", Site: "site-a", Weight: w[id], TargetWeight: w[id], TableWeight: siteTable[id]}
		if ramp {
			from := siteTable[id]
			if w[id] != 0 {
				from = 0
			}
			cs.Weight = (from + w[id]) / 2
			cs.Ramp = &adminproto.Ramp{FromWeight: from, ToWeight: w[id], Start: timestamppb.Now(), End: timestamppb.New(time.Now().Add(time.Second))}
		}
		out = append(out, cs)
	}
	return out
}

func (s *siteAdmin) ListCells(ctx context.Context, _ *adminproto.ListCellsRequest) (*adminproto.ListCellsResponse, error) {
	if err := s.auth(ctx); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.polls++
	ramp := s.ramping && s.polls < 3
	return &adminproto.ListCellsResponse{TableVersion: 8, Cells: append(s.cells(s.target, ramp),
		&adminproto.CellStatus{Id: "cell-b1", Pool: "main", Site: "site-b", Weight: 100, TargetWeight: 100, TableWeight: 100})}, nil
}

// change answers a site change to weights target: a dry run with its
// moves and the cells as they are, else the cells after it.
func (s *siteAdmin) change(site string, dryRun bool, samples int32, ramp bool, target map[string]int32) (*adminproto.SiteChange, error) {
	if site != "site-a" {
		return nil, status.Errorf(codes.NotFound, "site: unknown site %q: no cell of the table names it", site)
	}
	if dryRun {
		return &adminproto.SiteChange{Site: site, Version: 8, Samples: samples, Cells: s.cells(siteTable, false), Moves: []*adminproto.Move{
			{FromCell: "cell-b1", ToCell: "cell-b1", Keys: 70, Share: 0.7}, {FromCell: "cell-a1", ToCell: "cell-b1", Keys: 30, Share: 0.3},
		}}, nil
	}
	s.target, s.ramping, s.polls = target, ramp, 0
	return &adminproto.SiteChange{Site: site, Version: 8, Applied: true, Cells: s.cells(target, ramp)}, nil
}

func (s *siteAdmin) EvacuateSite(ctx context.Context, req *adminproto.EvacuateSiteRequest) (*adminproto.SiteChange, error) {
	if err := s.auth(ctx); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.evacuate = req
	return s.change(req.GetSite(), req.GetDryRun(), req.GetSamples(), req.GetOver() != nil, map[string]int32{"cell-a1": 0, "cell-a2": 0})
}

func (s *siteAdmin) RestoreSite(ctx context.Context, req *adminproto.RestoreSiteRequest) (*adminproto.SiteChange, error) {
	if err := s.auth(ctx); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.restore = req
	return s.change(req.GetSite(), req.GetDryRun(), req.GetSamples(), req.GetOver() != nil, siteTable)
}

func serveSites(t *testing.T) (*siteAdmin, string) {
	t.Helper()
	s := &siteAdmin{fakeAdmin: &fakeAdmin{}, target: siteTable}
	return s, serveOn(t, tlsServer(t), s)
}

// TestEvacuateDryRun: --dry-run sends the site, the ramp and the
// samples (100000 unless given), and prints the moves as table apply
// --dry-run does, then each cell of the site and where it would go.
func TestEvacuateDryRun(t *testing.T) {
	s, addr := serveSites(t)
	code, out, errs := gtrctl(t, "evacuate", "site-a", "--dry-run", "--over", "10m", "--samples", "5000", "--addr", addr, "--token", "tok")
	if code != 0 {
		t.Fatalf("code %d: %s", code, errs)
	}
	if r := s.evacuate; r.GetSite() != "site-a" || !r.GetDryRun() || r.GetSamples() != 5000 || r.GetOver().AsDuration() != 10*time.Minute {
		t.Fatalf("request %v", r)
	}
	for _, want := range []string{
		"dry run of evacuating site site-a (table version 8) over 5000 sampled keys, homes once the 10m0s ramp has ended (nothing changed):",
		"FROM     TO       KEYS  SHARE", "cell-b1  (stays)  70    70.00%", "cell-a1  cell-b1  30    30.00%",
		"30.00% of keys would move",
		"cells of site site-a:\ncell-a1: weight 100, would go to 0 (table weight 100)\ncell-a2: weight 80, would go to 0 (table weight 80)\n",
	} {
		if !strings.Contains(out, want) {
			t.Fatalf("output lacks %q:\n%s", want, out)
		}
	}
	if s.polls != 0 {
		t.Fatal("a dry run followed a ramp")
	}
	if code, _, errs := gtrctl(t, "evacuate", "--addr", addr, "--token", "tok", "--dry-run", "site-a"); code != 0 || s.evacuate.GetSamples() != 100000 || s.evacuate.GetOver() != nil {
		t.Fatalf("default samples: code %d, request %v: %s", code, s.evacuate, errs)
	}

	code, out, errs = gtrctl(t, "restore-site", "site-a", "--dry-run", "--addr", addr, "--token", "tok")
	if code != 0 || !s.restore.GetDryRun() || !strings.Contains(out, "dry run of restoring site site-a (table version 8) over 100000 sampled keys (nothing changed)") ||
		!strings.Contains(out, "cell-a2: weight 80, would go to 80 (table weight 80)") {
		t.Fatalf("restore-site --dry-run: code %d, request %v\n%s%s", code, s.restore, out, errs)
	}
}

// TestEvacuate: a change prints the site's cells after it and the
// version; a ramped one is followed until every cell's ramp ends, or
// printed at once with --no-wait; -o json prints the answer; an unknown
// site is the GTR's NOT_FOUND; a missing or extra site is a usage error.
func TestEvacuate(t *testing.T) {
	s, addr := serveSites(t)
	code, out, errs := gtrctl(t, "evacuate", "site-a", "--addr", addr, "--token", "tok")
	want := "site site-a evacuated, table version 8:\ncell-a1: weight 0 (table weight 100)\ncell-a2: weight 0 (table weight 80)\n"
	if code != 0 || out != want || s.evacuate.GetDryRun() || s.evacuate.GetOver() != nil {
		t.Fatalf("code %d, request %v\n%s\nwant\n%s%s", code, s.evacuate, out, want, errs)
	}

	code, out, errs = gtrctl(t, "evacuate", "site-a", "--over", "1s", "--addr", addr, "--token", "tok")
	if code != 0 || out != want || s.polls < 3 || s.evacuate.GetOver().AsDuration() != time.Second {
		t.Fatalf("ramped: code %d, %d polls\n%s%s", code, s.polls, out, errs)
	}

	code, out, errs = gtrctl(t, "evacuate", "site-a", "--over", "1s", "--no-wait", "--addr", addr, "--token", "tok")
	if code != 0 || s.polls != 0 || !strings.HasPrefix(out, "site site-a evacuated, table version 8:\ncell-a1: weight 50, ramping to 0 by ") ||
		!strings.Contains(out, "cell-a2: weight 40, ramping to 0 by ") {
		t.Fatalf("--no-wait: code %d, %d polls\n%s%s", code, s.polls, out, errs)
	}

	code, out, errs = gtrctl(t, "restore-site", "site-a", "--addr", addr, "--token", "tok", "-o", "json")
	var v struct {
		Site    string
		Version string
		Applied bool
		Cells   []struct {
			ID     string `json:"id"`
			Weight int
		}
	}
	if err := json.Unmarshal([]byte(out), &v); code != 0 || err != nil || v.Site != "site-a" || v.Version != "8" || !v.Applied ||
		len(v.Cells) != 2 || v.Cells[0].ID != "cell-a1" || v.Cells[0].Weight != 100 || v.Cells[1].Weight != 80 {
		t.Fatalf("restore-site -o json: code %d, %v: %s%s", code, err, out, errs)
	}

	code, _, errs = gtrctl(t, "evacuate", "site-z", "--addr", addr, "--token", "tok")
	if code != 1 || !strings.Contains(errs, `NotFound: site: unknown site "site-z"`) {
		t.Fatalf("unknown site: code %d %s", code, errs)
	}
	for _, args := range [][]string{{"evacuate"}, {"evacuate", "site-a", "site-b"}, {"restore-site"}} {
		if code, _, _ := gtrctl(t, append(args, "--addr", addr, "--token", "tok")...); code != 2 {
			t.Fatalf("%q: code %d, want 2 (usage)", args, code)
		}
	}
}
