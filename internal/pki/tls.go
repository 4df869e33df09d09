package pki

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"time"

	"google.golang.org/grpc/credentials/tls/certprovider"
	"google.golang.org/grpc/credentials/tls/certprovider/pemfile"
)

// DefaultRefresh is how often a served certificate's files are re-read, so
// that a certificate replaced in place (cert-manager renews the Secret, or
// an operator rotates it) is served without a restart.
const DefaultRefresh = 10 * time.Second

// ServerConfig is a TLS 1.2+ server configuration whose certificate comes
// from certFile and keyFile and is reloaded from them every refresh
// (DefaultRefresh when 0), by grpc-go's pemfile provider. Close stops the
// reloading. The files must exist and parse when it is called.
func ServerConfig(certFile, keyFile string, refresh time.Duration) (*tls.Config, func(), error) {
	if certFile == "" || keyFile == "" {
		return nil, nil, errors.New("pki: server TLS needs a certificate file and a key file")
	}
	if _, err := tls.LoadX509KeyPair(certFile, keyFile); err != nil {
		return nil, nil, fmt.Errorf("pki: server certificate %s: %w", certFile, err)
	}
	if refresh <= 0 {
		refresh = DefaultRefresh
	}
	prov, err := pemfile.NewProvider(pemfile.Options{CertFile: certFile, KeyFile: keyFile, RefreshDuration: refresh})
	if err != nil {
		return nil, nil, fmt.Errorf("pki: %w", err)
	}
	cfg := &tls.Config{
		MinVersion: tls.VersionTLS12,
		GetCertificate: func(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
			return identity(hello.Context(), prov)
		},
	}
	return cfg, prov.Close, nil
}

func identity(ctx context.Context, prov certprovider.Provider) (*tls.Certificate, error) {
	km, err := prov.KeyMaterial(ctx)
	if err != nil {
		return nil, fmt.Errorf("pki: certificate not available: %w", err)
	}
	if len(km.Certs) == 0 {
		return nil, errors.New("pki: no certificate loaded")
	}
	return &km.Certs[0], nil
}

// ClientConfig is a TLS 1.2+ client configuration that trusts only the CA
// certificates in caFile.
func ClientConfig(caFile string) (*tls.Config, error) {
	pool, err := CertPool(caFile)
	if err != nil {
		return nil, err
	}
	return &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: pool}, nil
}

// CertPool reads the PEM certificates of caFile.
func CertPool(caFile string) (*x509.CertPool, error) {
	b, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("pki: CA: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("pki: CA: %s holds no PEM certificate", caFile)
	}
	return pool, nil
}
