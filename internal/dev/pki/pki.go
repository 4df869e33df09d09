// Package pki provisions a development certificate authority and the
// certificates a local platform needs, with crypto/x509 and crypto/rand
// only (no openssl).
//
// It is for make run, the tests and the tools that talk to them, and never
// ships. In Kubernetes, cert-manager issues the certificates (deploy/k8s);
// the files have the same shape (ca.crt, tls.crt, tls.key), so the shipped
// loaders (internal/tlsconf) read both.
//
// Private keys are written with mode 0600 and never logged; no error here
// quotes a key.
package pki

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// File names inside a PKI directory.
const (
	CAFile    = "ca.crt"
	caKeyFile = "ca.key"
)

// CertFile and KeyFile are where Issue puts the certificate and key of name.
func CertFile(dir, name string) string { return filepath.Join(dir, name+".crt") }

// KeyFile is the private key beside CertFile.
func KeyFile(dir, name string) string { return filepath.Join(dir, name+".key") }

// Validity of what the development CA issues.
const (
	caValidity   = 5 * 365 * 24 * time.Hour
	certValidity = 365 * 24 * time.Hour
	// renewBefore: EnsureCert reissues a certificate this close to expiry.
	renewBefore = 30 * 24 * time.Hour
)

// CA is a certificate authority that can issue certificates.
type CA struct {
	Dir  string
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

// EnsureCA loads the CA in dir, or creates one (ECDSA P-256, five years)
// when there is none. The directory is created with mode 0700.
func EnsureCA(dir string) (*CA, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("pki: %w", err)
	}
	certPath, keyPath := filepath.Join(dir, CAFile), filepath.Join(dir, caKeyFile)
	if _, err := os.Stat(certPath); err == nil {
		cert, err := readCert(certPath)
		if err != nil {
			return nil, err
		}
		key, err := readKey(keyPath)
		if err != nil {
			return nil, err
		}
		return &CA{Dir: dir, cert: cert, key: key}, nil
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("pki: %w", err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "Cellpay development CA", Organization: []string{"Cellpay (development)"}},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(caValidity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("pki: create CA: %w", err)
	}
	cert, _ := x509.ParseCertificate(der)
	if err := writeKey(keyPath, key); err != nil {
		return nil, err
	}
	if err := writePEM(certPath, "CERTIFICATE", der, 0o644); err != nil {
		return nil, err
	}
	return &CA{Dir: dir, cert: cert, key: key}, nil
}

// CertFile is the CA's certificate file, for clients to trust.
func (ca *CA) CertFile() string { return filepath.Join(ca.Dir, CAFile) }

// Usage says what a certificate is for.
type Usage int

// Usages; a component that both serves and calls gets both.
const (
	Server Usage = 1 << iota
	Client
)

// EnsureCert makes sure CertFile(ca.Dir, name) holds a certificate of this
// CA for hosts (DNS names, IP addresses, or URIs such as the SPIFFE IDs of
// package hop; the common name is name) with
// usage, issuing a new one when there is none, it expires within 30 days,
// it was issued by another CA, or it does not cover hosts and usage.
func (ca *CA) EnsureCert(name string, hosts []string, usage Usage) error {
	certPath, keyPath := CertFile(ca.Dir, name), KeyFile(ca.Dir, name)
	if cert, err := readCert(certPath); err == nil && ca.covers(cert, name, hosts, usage) {
		if _, err := readKey(keyPath); err == nil {
			return nil
		}
	}
	return ca.Issue(name, hosts, usage)
}

func (ca *CA) covers(cert *x509.Certificate, name string, hosts []string, usage Usage) bool {
	if time.Until(cert.NotAfter) < renewBefore || cert.Subject.CommonName != name {
		return false
	}
	if usage&Server != 0 && !slices.Contains(cert.ExtKeyUsage, x509.ExtKeyUsageServerAuth) ||
		usage&Client != 0 && !slices.Contains(cert.ExtKeyUsage, x509.ExtKeyUsageClientAuth) {
		return false
	}
	if err := cert.CheckSignatureFrom(ca.cert); err != nil {
		return false
	}
	for _, h := range hosts {
		if strings.Contains(h, "://") {
			if !slices.ContainsFunc(cert.URIs, func(u *url.URL) bool { return u.String() == h }) {
				return false
			}
		} else if cert.VerifyHostname(h) != nil {
			return false
		}
	}
	return true
}

// Issue writes a new key and certificate for name, replacing any there.
// The files are replaced atomically, so a process that reloads them never
// reads half of one.
func (ca *CA) Issue(name string, hosts []string, usage Usage) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return fmt.Errorf("pki: %w", err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: name, Organization: []string{"Cellpay (development)"}},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(certValidity),
		KeyUsage:     x509.KeyUsageDigitalSignature,
	}
	if usage&Server != 0 {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageServerAuth)
	}
	if usage&Client != 0 {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageClientAuth)
	}
	for _, h := range hosts {
		if strings.Contains(h, "://") {
			u, err := url.Parse(h)
			if err != nil {
				return fmt.Errorf("pki: issue %s: %w", name, err)
			}
			tmpl.URIs = append(tmpl.URIs, u)
		} else if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		return fmt.Errorf("pki: issue %s: %w", name, err)
	}
	if err := writeKey(KeyFile(ca.Dir, name), key); err != nil {
		return err
	}
	// The certificate carries the CA too (a chain), as cert-manager's
	// tls.crt does not, but clients are given ca.crt either way.
	return writePEM(CertFile(ca.Dir, name), "CERTIFICATE", der, 0o644)
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		panic("pki: crypto/rand failed: " + err.Error()) // crypto/rand does not fail on Linux
	}
	return n
}

func writeKey(path string, key *ecdsa.PrivateKey) error {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return fmt.Errorf("pki: %w", err)
	}
	return writePEM(path, "PRIVATE KEY", der, 0o600)
}

func writePEM(path, typ string, der []byte, mode os.FileMode) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".pki-*")
	if err != nil {
		return fmt.Errorf("pki: %w", err)
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(mode); err != nil {
		tmp.Close()
		return fmt.Errorf("pki: %w", err)
	}
	if err := pem.Encode(tmp, &pem.Block{Type: typ, Bytes: der}); err != nil {
		tmp.Close()
		return fmt.Errorf("pki: write %s: %w", filepath.Base(path), err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("pki: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("pki: %w", err)
	}
	return nil
}

// ReadCertificate reads the first certificate of the PEM file path (a
// leaf, when the file holds a chain).
func ReadCertificate(path string) (*x509.Certificate, error) { return readCert(path) }

func readCert(path string) (*x509.Certificate, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("pki: %w", err)
	}
	blk, _ := pem.Decode(b)
	if blk == nil || blk.Type != "CERTIFICATE" {
		return nil, fmt.Errorf("pki: %s: no PEM certificate", path)
	}
	c, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		return nil, fmt.Errorf("pki: %s: %w", path, err)
	}
	return c, nil
}

func readKey(path string) (*ecdsa.PrivateKey, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("pki: %w", err)
	}
	blk, _ := pem.Decode(b)
	if blk == nil {
		return nil, fmt.Errorf("pki: %s: no PEM private key", path)
	}
	k, err := x509.ParsePKCS8PrivateKey(blk.Bytes)
	if err != nil {
		return nil, fmt.Errorf("pki: %s: not a PKCS#8 private key", path)
	}
	ek, ok := k.(*ecdsa.PrivateKey)
	if !ok {
		return nil, errors.New("pki: " + path + ": not an ECDSA key")
	}
	return ek, nil
}

// Loopback provisions, in dir, a CA and a server certificate called name
// for 127.0.0.1, ::1 and localhost, and returns the certificate, key and CA
// files: what a test or a local tool needs to serve TLS on loopback.
func Loopback(dir, name string) (certFile, keyFile, caFile string, err error) {
	ca, err := EnsureCA(dir)
	if err != nil {
		return "", "", "", err
	}
	if err := ca.EnsureCert(name, []string{"127.0.0.1", "::1", "localhost"}, Server); err != nil {
		return "", "", "", err
	}
	return CertFile(dir, name), KeyFile(dir, name), ca.CertFile(), nil
}
