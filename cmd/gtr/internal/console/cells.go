package console

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"slices"
	"time"

	"google.golang.org/grpc"

	"github.com/cellpay/cellpay/pkg/adminproto"
	"github.com/cellpay/cellpay/pkg/routing"
)

type instanceJSON struct {
	Addr      string     `json:"addr"`
	Health    string     `json:"health"`
	Detail    string     `json:"detail,omitempty"`
	CheckedAt *time.Time `json:"checked_at,omitempty"`
}

type rampJSON struct {
	From int32     `json:"from"`
	To   int32     `json:"to"`
	End  time.Time `json:"end"`
}

type cellJSON struct {
	ID string `json:"id"`
	// Site is the site the table names for the cell, "" for none.
	Site           string         `json:"site"`
	Pool           string         `json:"pool"`
	Balancer       string         `json:"balancer"`
	Health         string         `json:"health"`
	HealthShare    int32          `json:"health_share"`
	Weight         int32          `json:"weight"`
	TargetWeight   int32          `json:"target_weight"`
	TableWeight    int32          `json:"table_weight"`
	Share          float64        `json:"share"` // of all keys, 0..1
	InFlight       int64          `json:"in_flight"`
	SuccessRate    float64        `json:"success_rate"`
	RecentRequests int64          `json:"recent_requests"`
	RefdataVersion uint64         `json:"refdata_version"`
	Ramp           *rampJSON      `json:"ramp,omitempty"`
	Instances      []instanceJSON `json:"instances"`
	// Replicas is every GTR replica's own health verdict on the cell.
	Replicas []replicaJSON `json:"replicas,omitempty"`
}

func healthText(h adminproto.Health) string {
	switch h {
	case adminproto.Health_HEALTH_UP:
		return "up"
	case adminproto.Health_HEALTH_DOWN:
		return "down"
	}
	return "unknown"
}

// replicaJSON is one replica's view of a cell.
type replicaJSON struct {
	Replica     string `json:"replica"`
	Site        string `json:"site,omitempty"` // the replica's, "" for none
	HealthShare int32  `json:"health_share"`
	InFlight    int64  `json:"in_flight"`
}

func cellView(c *adminproto.CellStatus) cellJSON {
	cj := cellJSON{ID: c.GetId(), Site: c.GetSite(), Pool: c.GetPool(), Balancer: c.GetBalancer(), Health: healthText(c.GetHealth()), HealthShare: c.GetHealthShare(),
		Weight: c.GetWeight(), TargetWeight: c.GetTargetWeight(), TableWeight: c.GetTableWeight(), Share: c.GetTrafficShare(),
		InFlight: c.GetInFlight(), SuccessRate: c.GetSuccessRate(), RecentRequests: c.GetRecentRequests(),
		RefdataVersion: c.GetRefdataVersion(), Instances: []instanceJSON{}}
	if r := c.GetRamp(); r != nil {
		cj.Ramp = &rampJSON{From: r.GetFromWeight(), To: r.GetToWeight(), End: r.GetEnd().AsTime()}
	}
	for _, i := range c.GetInstances() {
		ij := instanceJSON{Addr: i.GetAddr(), Health: healthText(i.GetHealth()), Detail: i.GetDetail()}
		if i.GetCheckedAt() != nil {
			t := i.GetCheckedAt().AsTime()
			ij.CheckedAt = &t
		}
		cj.Instances = append(cj.Instances, ij)
	}
	for _, v := range c.GetReplicas() {
		cj.Replicas = append(cj.Replicas, replicaJSON{Replica: v.GetReplica(), Site: v.GetSite(), HealthShare: v.GetHealthShare(), InFlight: v.GetInFlight()})
	}
	return cj
}

func (h *Handler) listCells(w http.ResponseWriter, r *http.Request, s session) (*adminproto.ListCellsResponse, bool) {
	var resp *adminproto.ListCellsResponse
	failed := h.call(w, r, s, func(ctx context.Context, opt grpc.CallOption) (err error) {
		resp, err = h.cfg.Admin.ListCells(ctx, &adminproto.ListCellsRequest{}, opt)
		return err
	})
	return resp, !failed
}

func (h *Handler) cells(w http.ResponseWriter, r *http.Request, s session) {
	resp, ok := h.listCells(w, r, s)
	if !ok {
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"table_version": resp.GetTableVersion(), "replica": resp.GetReplicaId(),
		"config_store": resp.GetConfigStore(), "cells": cellsBySite(resp.GetCells())})
}

// cellsBySite is the cells as the page shows them, a site's together: by
// site, then cell ID, cells of no named site last (the page heads each
// site's group; gtrctl cells orders its rows the same way).
func cellsBySite(cells []*adminproto.CellStatus) []cellJSON {
	out := make([]cellJSON, 0, len(cells))
	for _, c := range cells {
		out = append(out, cellView(c))
	}
	slices.SortStableFunc(out, func(a, b cellJSON) int { return routing.CompareBySite(a.Site, a.ID, b.Site, b.ID) })
	return out
}

// previewJSON is what a change would do to the cell's share of keys.
type previewJSON struct {
	Cell       string  `json:"cell"`
	FromWeight int32   `json:"from_weight"`
	ToWeight   int32   `json:"to_weight"`
	Share      float64 `json:"share"`       // the cell's share of all keys now
	ShareAfter float64 `json:"share_after"` // expected after the change; -1 unknown
	Moved      float64 `json:"moved"`       // share of all keys changing home; -1 unknown
	Text       string  `json:"text"`
}

// preview estimates what a change would move, by the routing rule: a key
// stays on a cell while hash(key, cell) mod 100 < weight, so lowering a
// cell's weight from w to w' sends (w-w')/w of its keys to their next
// cell and moves no other key; raising it brings back the keys whose
// bucket is in [w, w'), (w'-w)/w of its share now. A cell at weight 0
// has no share to scale, so what raising it brings back is unknown here
// (gtrctl table apply --dry-run samples it exactly, for admins).
func preview(c *adminproto.CellStatus, req changeReq) (previewJSON, error) {
	from := c.GetWeight()
	var to int32
	switch req.Action {
	case "drain":
		if req.Percent < 0 || req.Percent > 100 {
			return previewJSON{}, fmt.Errorf("percent: %d outside 0..100", req.Percent)
		}
		to = c.GetTableWeight() * (100 - req.Percent) / 100
	case "restore":
		to = c.GetTableWeight()
	case "weight":
		if req.Weight < 0 || req.Weight > 100 {
			return previewJSON{}, fmt.Errorf("weight: %d outside 0..100", req.Weight)
		}
		to = req.Weight
	default:
		return previewJSON{}, fmt.Errorf("action: %q is not drain, restore or weight", req.Action)
	}
	s := c.GetTrafficShare()
	p := previewJSON{Cell: c.GetId(), FromWeight: from, ToWeight: to, Share: s, ShareAfter: s}
	switch {
	case to == from:
		p.Text = fmt.Sprintf("weight stays %d: no key moves", to)
	case from == 0:
		p.ShareAfter, p.Moved = -1, -1
		p.Text = fmt.Sprintf("weight 0 → %d: keys come back to %s; their share is not known while it takes none", to, c.GetId())
	default:
		f := float64(to-from) / float64(from)
		p.ShareAfter = s * (1 + f)
		p.Moved = s * math.Abs(f)
		dir := "move away from"
		if to > from {
			dir = "come back to"
		}
		p.Text = fmt.Sprintf("weight %d → %d: about %.1f%% of all keys %s %s (its share %.1f%% → %.1f%%)",
			from, to, 100*p.Moved, dir, c.GetId(), 100*s, 100*p.ShareAfter)
	}
	if over, err := req.over(); err != nil {
		return previewJSON{}, err
	} else if over != nil && to != from {
		p.Text += fmt.Sprintf(", ramped over %v", over.AsDuration())
	}
	return p, nil
}

func (h *Handler) preview(w http.ResponseWriter, r *http.Request, s session) {
	var req changeReq
	if err := decode(r, &req); err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	resp, ok := h.listCells(w, r, s)
	if !ok {
		return
	}
	for _, c := range resp.GetCells() {
		if c.GetId() == req.Cell {
			p, err := preview(c, req)
			if err != nil {
				writeError(w, http.StatusBadRequest, err.Error())
				return
			}
			writeJSON(w, http.StatusOK, p)
			return
		}
	}
	writeError(w, http.StatusNotFound, fmt.Sprintf("cell %q is not in the table", req.Cell))
}

// NewServer is the console's http.Server, bounded on its own: headers,
// time to read a request and to answer it, idle connections.
func NewServer(h http.Handler, log *slog.Logger) *http.Server {
	return &http.Server{Handler: h, ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn), ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second,
		WriteTimeout: 30 * time.Second, IdleTimeout: 2 * time.Minute, MaxHeaderBytes: 16 << 10}
}
