package gtr

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/cellpay/cellpay/cmd/gtr/internal/console"
	"github.com/cellpay/cellpay/cmd/gtr/internal/refusals"
	"github.com/cellpay/cellpay/cmd/gtr/internal/replicas"
	"github.com/cellpay/cellpay/pkg/adminproto"
)

// The questions GTR replicas ask one another (package replicas).
const (
	askReference = "reference" // a refusal by its request ID: the JSON string
	askEvents    = "events"    // the recent re-routes and ejections: a JSON limit
	askCells     = "cells"     // each cell as this replica sees it: no question
)

// cellView is a replica's view of one cell (adminproto.ReplicaCellView).
type cellView struct {
	Cell           string  `json:"cell"`
	HealthShare    int32   `json:"health_share"`
	InFlight       int64   `json:"in_flight"`
	SuccessRate    float64 `json:"success_rate"`
	RecentRequests int64   `json:"recent_requests"`
}

// startReplicas answers the other replicas' questions about this one (its
// refusals, its recent events) and lets the admin API and the console ask
// them all.
func (g *GTR) startReplicas(context.Context) error {
	r, err := replicas.Start(replicas.Config{ReplicaID: cmp.Or(g.cfg.ReplicaID, "gtr"), Site: g.cfg.Site, NATSURL: g.cfg.NATSURL, NATSTLS: g.cfg.NATSTLS, Log: g.cfg.Log,
		Handlers: map[string]replicas.Handler{
			askReference: func(_ context.Context, q []byte) (json.RawMessage, error) {
				var id string
				if err := json.Unmarshal(q, &id); err != nil {
					return nil, err
				}
				r, ok := g.refusals.Find(id)
				if !ok {
					return nil, nil
				}
				return json.Marshal(r)
			},
			askCells: func(context.Context, []byte) (json.RawMessage, error) {
				d, _, ok := g.st.Doc()
				if !ok {
					return nil, errors.New("no routing table")
				}
				views := make([]cellView, 0, len(d.Cells))
				for _, c := range d.Cells {
					s := g.mon.Stats(c.ID)
					views = append(views, cellView{Cell: c.ID, HealthShare: int32(g.mon.Share(c.ID)), InFlight: g.st.Stats(c.ID).InFlight,
						SuccessRate: s.SuccessRate, RecentRequests: int64(s.Recent)})
				}
				return json.Marshal(views)
			},
			askEvents: func(_ context.Context, q []byte) (json.RawMessage, error) {
				var limit int
				if err := json.Unmarshal(q, &limit); err != nil {
					return nil, err
				}
				return json.Marshal(g.recent.List(limit))
			},
		}})
	if err != nil {
		return err
	}
	g.replicas = r
	g.rel.Add(r.Close)
	return nil
}

// findReference asks every replica for the refusal under request ID id.
func (g *GTR) findReference(ctx context.Context, id string) ([]*adminproto.Refusal, []string, error) {
	q, _ := json.Marshal(id)
	answers, err := g.replicas.Ask(ctx, askReference, q)
	if err != nil {
		return nil, nil, err
	}
	var found []*adminproto.Refusal
	names := make([]string, 0, len(answers))
	for _, a := range answers {
		names = append(names, a.Replica)
		if len(a.Body) == 0 || string(a.Body) == "null" {
			continue
		}
		var r refusals.Refusal
		if err := json.Unmarshal(a.Body, &r); err != nil {
			continue
		}
		found = append(found, &adminproto.Refusal{Replica: a.Replica, RequestId: r.RequestID, Time: timestamppb.New(r.Time),
			Method: r.Method, PartnerId: r.PartnerID, TransactionId: r.TransactionID, Code: r.Code, Reason: r.Reason, Message: r.Message})
	}
	return found, names, nil
}

// events asks every replica for its last limit events, merged newest
// first and cut to limit, each naming its replica.
func (g *GTR) events(ctx context.Context, limit int) ([]console.Event, error) {
	q, _ := json.Marshal(limit)
	answers, err := g.replicas.Ask(ctx, askEvents, q)
	if err != nil {
		return nil, err
	}
	var lists [][]console.Event
	var errs []error
	for _, a := range answers {
		var evs []console.Event
		if err := json.Unmarshal(a.Body, &evs); err != nil {
			errs = append(errs, err)
			continue
		}
		for i := range evs {
			evs[i].Replica = a.Replica
		}
		lists = append(lists, evs)
	}
	return console.MergeEvents(limit, lists...), errors.Join(errs...)
}

// cellViews asks every replica how it sees each cell, by cell.
func (g *GTR) cellViews(ctx context.Context) (map[string][]*adminproto.ReplicaCellView, error) {
	answers, err := g.replicas.Ask(ctx, askCells, nil)
	if err != nil {
		return nil, err
	}
	out := map[string][]*adminproto.ReplicaCellView{}
	for _, a := range answers {
		var views []cellView
		if json.Unmarshal(a.Body, &views) != nil {
			continue
		}
		for _, v := range views {
			out[v.Cell] = append(out[v.Cell], &adminproto.ReplicaCellView{Replica: a.Replica, Site: a.Site, HealthShare: v.HealthShare, InFlight: v.InFlight,
				SuccessRate: v.SuccessRate, RecentRequests: v.RecentRequests})
		}
	}
	return out, nil
}
