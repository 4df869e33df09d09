// Package gtr assembles the Global Transaction Router: the routing table,
// the connections to cells and the public Payments API with gRPC health and
// reflection.
package gtr

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"

	"github.com/cellpay/cellpay/cmd/gtr/internal/cellconn"
	"github.com/cellpay/cellpay/cmd/gtr/internal/config"
	"github.com/cellpay/cellpay/cmd/gtr/internal/payments"
	"github.com/cellpay/cellpay/pkg/api/cellpayv1"
	"github.com/cellpay/cellpay/pkg/routing"
)

// Config is everything the GTR needs to run.
type Config struct {
	Listen      string // partners' Payments API
	AdminListen string // operators' listener; never the partners' port
	ConfigFile  string // routing table (YAML)
	// ShutdownTimeout bounds finishing in-flight requests; default 15s.
	ShutdownTimeout time.Duration
	Log             *slog.Logger
}

func (c *Config) validate() error {
	if c.Listen == "" || c.ConfigFile == "" {
		return errors.New("gtr: listen address and config file are required")
	}
	if c.AdminListen != "" && c.AdminListen == c.Listen {
		return errors.New("gtr: the admin listener must not be the partners' address")
	}
	if c.ShutdownTimeout <= 0 {
		c.ShutdownTimeout = 15 * time.Second
	}
	if c.Log == nil {
		c.Log = slog.Default()
	}
	return nil
}

// Run serves until ctx ends, then stops taking requests, finishes the ones
// in flight (bounded by ShutdownTimeout) and returns.
func Run(ctx context.Context, cfg Config) error {
	if err := cfg.validate(); err != nil {
		return err
	}
	spec, err := config.Load(cfg.ConfigFile)
	if err != nil {
		return err
	}
	table, err := routing.Compile(spec)
	if err != nil {
		return err
	}
	var current atomic.Pointer[routing.Table]
	current.Store(table)

	pool := cellconn.New()
	defer pool.Close()
	pay, err := payments.New(payments.Config{Table: current.Load, Cells: pool, Log: cfg.Log})
	if err != nil {
		return err
	}
	hs := health.NewServer()
	gs := grpc.NewServer()
	cellpayv1.RegisterPaymentsServer(gs, pay)
	healthpb.RegisterHealthServer(gs, hs)
	reflection.Register(gs)
	servers := []*grpc.Server{gs}
	lis, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return fmt.Errorf("gtr: listen: %w", err)
	}
	listeners := []net.Listener{lis}
	if cfg.AdminListen != "" {
		// The admin API (cellpay.admin.v1) is not built yet; this listener
		// serves only gRPC health so that operators' probes have a target.
		alis, err := net.Listen("tcp", cfg.AdminListen)
		if err != nil {
			lis.Close()
			return fmt.Errorf("gtr: admin listen: %w", err)
		}
		as := grpc.NewServer()
		healthpb.RegisterHealthServer(as, hs)
		servers = append(servers, as)
		listeners = append(listeners, alis)
	}
	errc := make(chan error, len(servers))
	for i, s := range servers {
		go func() { errc <- s.Serve(listeners[i]) }()
	}
	cfg.Log.Info("gtr listening", "addr", lis.Addr().String(), "admin_addr", cfg.AdminListen,
		"table_version", table.Version(), "cells", len(spec.Cells), "rules", len(spec.Rules))
	select {
	case err := <-errc:
		return fmt.Errorf("gtr: serve: %w", err)
	case <-ctx.Done():
	}
	hs.Shutdown()
	done := make(chan struct{})
	go func() {
		for _, s := range servers {
			s.GracefulStop()
		}
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(cfg.ShutdownTimeout):
		for _, s := range servers {
			s.Stop()
		}
	}
	cfg.Log.Info("gtr stopped")
	return nil
}
