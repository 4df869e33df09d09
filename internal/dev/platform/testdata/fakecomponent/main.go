// Command fakecomponent stands in for gtr, cell and issuersim in the
// platform's own tests: it takes their flags, checks what it was given
// (the databases answer, the PAN key is readable), serves gRPC health as
// SERVING on -listen, and exits 0 on SIGTERM.
package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

func main() {
	fs := flag.NewFlagSet(os.Args[0], flag.ExitOnError)
	listen := fs.String("listen", "", "")
	dbURL := fs.String("database-url", os.Getenv("CELL_DATABASE_URL"), "")
	migrateURL := fs.String("migrate-database-url", os.Getenv("CELL_MIGRATE_DATABASE_URL"), "")
	panKey := fs.String("pan-key-file", "", "")
	tlsCert := fs.String("tls-cert", "", "")
	tlsKey := fs.String("tls-key", "", "")
	tlsCA := fs.String("tls-ca", "", "")
	for _, name := range []string{"cell-ca", "id", "issuer", "refdata", "admin-listen", "config", "operators", "audit-file", "state-file", "partners", "callback-ca-file", "partners-state-file", "replica-id", "site", "instance"} {
		fs.String(name, "", "")
	}
	fs.Bool("reflection", false, "")
	fs.Parse(os.Args[1:])

	for _, u := range []string{*migrateURL, *dbURL} {
		if u == "" {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		conn, err := pgx.Connect(ctx, u)
		if err == nil {
			err = conn.Ping(ctx)
			conn.Close(ctx)
		}
		cancel()
		if err != nil {
			fmt.Fprintln(os.Stderr, "database:", err)
			os.Exit(1)
		}
	}
	if *panKey != "" {
		if _, err := os.ReadFile(*panKey); err != nil {
			fmt.Fprintln(os.Stderr, "pan key:", err)
			os.Exit(1)
		}
	}
	l, err := net.Listen("tcp", *listen)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	var opts []grpc.ServerOption
	if *tlsCert != "" {
		cert, err := tls.LoadX509KeyPair(*tlsCert, *tlsKey)
		if err != nil {
			fmt.Fprintln(os.Stderr, "tls:", err)
			os.Exit(1)
		}
		cfg := &tls.Config{Certificates: []tls.Certificate{cert}}
		if *tlsCA != "" { // mutual TLS, as a cell and the issuer serve it
			b, err := os.ReadFile(*tlsCA)
			if err != nil {
				fmt.Fprintln(os.Stderr, "tls:", err)
				os.Exit(1)
			}
			cfg.ClientCAs = x509.NewCertPool()
			cfg.ClientCAs.AppendCertsFromPEM(b)
			cfg.ClientAuth = tls.RequireAndVerifyClientCert
		}
		opts = append(opts, grpc.Creds(credentials.NewTLS(cfg)))
	}
	srv := grpc.NewServer(opts...)
	healthpb.RegisterHealthServer(srv, health.NewServer())
	go func() {
		ch := make(chan os.Signal, 1)
		signal.Notify(ch, syscall.SIGTERM)
		<-ch
		fmt.Println("stopping")
		srv.GracefulStop()
	}()
	fmt.Printf("serving on %s\n", l.Addr())
	if err := srv.Serve(l); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
