// Command gtr runs the Global Transaction Router: the partners' Payments
// API, which routes every transaction to a cell.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/cellpay/cellpay/cmd/gtr/internal/gtr"
)

func env(name, def string) string {
	if v, ok := os.LookupEnv(name); ok {
		return v
	}
	return def
}

func main() {
	var cfg gtr.Config
	flag.StringVar(&cfg.Listen, "listen", env("GTR_LISTEN", "127.0.0.1:7070"), "partners' API address (env GTR_LISTEN)")
	flag.StringVar(&cfg.AdminListen, "admin-listen", env("GTR_ADMIN_LISTEN", "127.0.0.1:7071"), "admin API address (env GTR_ADMIN_LISTEN)")
	flag.StringVar(&cfg.ConfigFile, "config", env("GTR_CONFIG", "config/gtr.yaml"), "routing table file (env GTR_CONFIG)")
	flag.Parse()
	cfg.Log = slog.New(slog.NewJSONHandler(os.Stderr, nil))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := gtr.Run(ctx, cfg); err != nil {
		fmt.Fprintln(os.Stderr, "gtr:", err)
		os.Exit(1)
	}
}
