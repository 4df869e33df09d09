// Package tlsconf loads TLS configurations from PEM files (a certificate,
// its key and a CA): the servers' and clients' of every hop, mutual or not,
// with the certificate re-read while it runs so that a renewal is served
// without a restart.
//
// The files come from cert-manager in Kubernetes and from the development
// CA (internal/dev/pki) on one machine; they have the same shape. No error
// here quotes a key.
package tlsconf

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
	forget := serving(prov)
	return cfg, func() { forget(); prov.Close() }, nil
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

// Files are the PEM files of a component's identity on an internal hop:
// its certificate and key, and the CA that its peers' certificates must
// chain to. cert-manager's Secrets hold the same three (tls.crt, tls.key,
// ca.crt).
type Files struct {
	Cert, Key, CA string
}

// Set reports whether any of the files is named; a component with none
// serves and dials without TLS.
func (f Files) Set() bool { return f.Cert != "" || f.Key != "" || f.CA != "" }

func (f Files) validate() error {
	if f.Cert == "" || f.Key == "" || f.CA == "" {
		return errors.New("pki: mutual TLS needs a certificate, a key and a CA file")
	}
	return nil
}

// MutualServerConfig is ServerConfig that also requires every client to
// present a certificate of the CA in f.CA (tls.RequireAndVerifyClientCert).
// The certificate and key are reloaded every refresh; the CA is read once.
func MutualServerConfig(f Files, refresh time.Duration) (*tls.Config, func(), error) {
	if err := f.validate(); err != nil {
		return nil, nil, err
	}
	pool, err := CertPool(f.CA)
	if err != nil {
		return nil, nil, err
	}
	cfg, stop, err := ServerConfig(f.Cert, f.Key, refresh)
	if err != nil {
		return nil, nil, err
	}
	cfg.ClientAuth = tls.RequireAndVerifyClientCert
	cfg.ClientCAs = pool
	return cfg, stop, nil
}

// MutualClientConfig is a TLS 1.2+ client configuration that trusts only
// the CA in f.CA and presents the certificate in f.Cert and f.Key,
// reloaded from them every refresh (DefaultRefresh when 0) as
// ServerConfig's is. Close stops the reloading.
func MutualClientConfig(f Files, refresh time.Duration) (*tls.Config, func(), error) {
	if err := f.validate(); err != nil {
		return nil, nil, err
	}
	cfg, err := ClientConfig(f.CA)
	if err != nil {
		return nil, nil, err
	}
	if _, err := tls.LoadX509KeyPair(f.Cert, f.Key); err != nil {
		return nil, nil, fmt.Errorf("pki: client certificate %s: %w", f.Cert, err)
	}
	if refresh <= 0 {
		refresh = DefaultRefresh
	}
	prov, err := pemfile.NewProvider(pemfile.Options{CertFile: f.Cert, KeyFile: f.Key, RefreshDuration: refresh})
	if err != nil {
		return nil, nil, fmt.Errorf("pki: %w", err)
	}
	cfg.GetClientCertificate = func(info *tls.CertificateRequestInfo) (*tls.Certificate, error) {
		return identity(info.Context(), prov)
	}
	return cfg, prov.Close, nil
}

// LoadKeyPair is tls.LoadX509KeyPair for files that may be being replaced:
// Issue, like cert-manager, renames the new key into place and then the new
// certificate, so a reader between the two sees a key that does not match
// its certificate. LoadKeyPair reads both again, a few times over about
// 100 ms, before it gives up with the last error. It is for a client
// that reads its certificate at each handshake (natsconn).
func LoadKeyPair(certFile, keyFile string) (tls.Certificate, error) {
	var err error
	for i := 0; ; i++ {
		var pair tls.Certificate
		if pair, err = tls.LoadX509KeyPair(certFile, keyFile); err == nil {
			return pair, nil
		}
		if i == 4 {
			return tls.Certificate{}, err
		}
		time.Sleep(25 * time.Millisecond)
	}
}
