// Package objstore runs an S3-compatible object store on loopback for
// tests: what CloudNativePG's Barman Cloud plugin writes a cell's backups
// to in Kubernetes (an S3 bucket), served in memory by gofakes3 behind
// TLS (a development CA of its own) and an access key check.
//
// The check is a fixture's, not a store's: a request must carry an AWS
// Signature Version 4 Authorization header whose credential names the
// store's access key ID; the signature itself is not verified (gofakes3
// verifies none). It keeps every other client of the host out of the
// bucket, and it proves that the client under test sends the configured
// credentials, which is what a test of a backup tool needs. Never use it
// beyond tests.
package objstore

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"

	"github.com/cellpay/cellpay/internal/dev/pki"
)

// Region is the region clients are told to sign for.
const Region = "us-east-1"

// Store is a running object store.
type Store struct {
	// URL is the endpoint, https://127.0.0.1:PORT.
	URL string
	// CAFile is the certificate of the CA that signed the store's, for
	// clients to trust (AWS_CA_BUNDLE); readable by every user, so that a
	// Postgres server's restore_command can use it too.
	CAFile string
	// AccessKeyID and SecretAccessKey are the credentials clients sign
	// with: random hex, safe in a shell command.
	AccessKeyID, SecretAccessKey string

	backend *s3mem.Backend
	srv     *http.Server
	done    chan error
	// refused is set by a request without the store's access key ID.
	refused atomic.Bool
}

// Start serves a new, empty store on a free loopback port with the
// buckets named, its CA and certificate kept in dir (created 0755: the CA
// certificate is public).
func Start(dir string, buckets ...string) (*Store, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("objstore: %w", err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		return nil, fmt.Errorf("objstore: %w", err)
	}
	ca, err := pki.EnsureCA(filepath.Join(dir, "pki"))
	if err != nil {
		return nil, fmt.Errorf("objstore: %w", err)
	}
	if err := ca.EnsureCert("objstore", []string{"127.0.0.1"}, pki.Server); err != nil {
		return nil, fmt.Errorf("objstore: %w", err)
	}
	caPEM, err := os.ReadFile(ca.CertFile())
	if err != nil {
		return nil, fmt.Errorf("objstore: %w", err)
	}
	caFile := filepath.Join(dir, "ca.crt")
	if err := os.WriteFile(caFile, caPEM, 0o644); err != nil {
		return nil, fmt.Errorf("objstore: %w", err)
	}
	cert, err := tls.LoadX509KeyPair(pki.CertFile(ca.Dir, "objstore"), pki.KeyFile(ca.Dir, "objstore"))
	if err != nil {
		return nil, fmt.Errorf("objstore: %w", err)
	}
	s := &Store{CAFile: caFile, AccessKeyID: "AK" + randomHex(9), SecretAccessKey: randomHex(20),
		backend: s3mem.New(), done: make(chan error, 1)}
	for _, b := range buckets {
		if err := s.backend.CreateBucket(b); err != nil {
			return nil, fmt.Errorf("objstore: bucket %s: %w", b, err)
		}
	}
	fake := gofakes3.New(s.backend, gofakes3.WithLogger(gofakes3.DiscardLog()), gofakes3.WithAutoBucket(false))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("objstore: %w", err)
	}
	s.URL = "https://" + ln.Addr().String()
	s.srv = &http.Server{
		Handler:           s.authenticated(fake.Server()),
		TLSConfig:         &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12},
		ReadHeaderTimeout: 10 * time.Second,
		MaxHeaderBytes:    64 << 10,
	}
	go func() { s.done <- s.srv.ServeTLS(ln, "", "") }()
	return s, nil
}

// authenticated refuses, 403, a request whose Authorization header does
// not name the store's access key ID in its credential.
func (s *Store) authenticated(next http.Handler) http.Handler {
	want := "Credential=" + s.AccessKeyID + "/"
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		auth := r.Header.Get("Authorization")
		if !strings.HasPrefix(auth, "AWS4-HMAC-SHA256 ") || !strings.Contains(auth, want) {
			s.refused.Store(true)
			http.Error(w, "AccessDenied: sign with the store's access key", http.StatusForbidden)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// Refused reports whether the store has refused a request for its
// credentials since it started.
func (s *Store) Refused() bool { return s.refused.Load() }

// Env is the environment an AWS client (boto3, and so barman-cloud) needs
// to reach the store: its credentials, region and CA.
func (s *Store) Env() []string {
	return []string{"AWS_ACCESS_KEY_ID=" + s.AccessKeyID, "AWS_SECRET_ACCESS_KEY=" + s.SecretAccessKey,
		"AWS_DEFAULT_REGION=" + Region, "AWS_CA_BUNDLE=" + s.CAFile}
}

// Keys lists the keys of bucket under prefix, at most limit of them.
func (s *Store) Keys(bucket, prefix string, limit int) ([]string, error) {
	list, err := s.backend.ListBucket(bucket, &gofakes3.Prefix{Prefix: prefix, HasPrefix: true}, gofakes3.ListBucketPage{MaxKeys: int64(limit)})
	if err != nil {
		return nil, fmt.Errorf("objstore: %w", err)
	}
	var keys []string
	for _, c := range list.Contents {
		keys = append(keys, c.Key)
	}
	return keys, nil
}

// Close stops the store; what it held is gone.
func (s *Store) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := s.srv.Shutdown(ctx)
	if serr := <-s.done; !errors.Is(serr, http.ErrServerClosed) && serr != nil {
		err = errors.Join(err, serr)
	}
	return err
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // never fails (crypto/rand's contract)
	return hex.EncodeToString(b)
}
