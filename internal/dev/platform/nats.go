package platform

import (
	"context"
	"crypto/x509"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/cellpay/cellpay/internal/dev/pki"
	"github.com/cellpay/cellpay/internal/hop"
	"github.com/cellpay/cellpay/internal/natsauth"
	"github.com/cellpay/cellpay/internal/natsconn"
)

// FindNATSServer returns the path of a nats-server binary, or "".
func FindNATSServer() string {
	if p, err := exec.LookPath("nats-server"); err == nil {
		return p
	}
	if _, err := os.Stat("/usr/sbin/nats-server"); err == nil {
		return "/usr/sbin/nats-server"
	}
	return ""
}

// NATSURL is the platform's NATS URL, or "" when it runs without NATS.
// NATS speaks TLS only, and takes only clients with a certificate of the
// development CA whose identity is one of natsauth.Users: dial it with
// NATSOptions.
func (p *Platform) NATSURL() string {
	if !p.cfg.NATS {
		return ""
	}
	return "tls://" + p.cfg.NATSAddr
}

// NATS certificates, under DataDir/pki: the server's, the replicator's
// (hop.Replicator) and NATS's administrator's (hop.NATSAdmin: the
// launcher's and tests' tools).
const (
	natsCertName = "nats"
	// ReplicatorCertName and NATSAdminCertName name the replicator's and
	// NATS's administrator's certificates for TLSFiles.
	ReplicatorCertName = "replicator"
	NATSAdminCertName  = "nats-admin"
)

// NATSOptions are the options of a NATS client with NATS's administrator
// identity (hop.NATSAdmin), which may do anything: for tests and tools.
func (p *Platform) NATSOptions() ([]nats.Option, error) {
	return natsconn.TLSOptions(p.TLSFiles(NATSAdminCertName))
}

// ReplicatorArgs are the replicator's flags for this platform's NATS, as
// the replicator (hop.Replicator), before its command.
func (p *Platform) ReplicatorArgs() []string {
	f := p.TLSFiles(ReplicatorCertName)
	return []string{"-nats-url", p.NATSURL(), "-tls-cert", f.Cert, "-tls-key", f.Key, "-tls-ca", f.CA}
}

// writeNATSConfig issues NATS's certificates and writes its configuration
// (package natsauth: TLS, a user per component) to DataDir/nats.conf.
func (p *Platform) writeNATSConfig(host string, port int, store string) (string, error) {
	ca, err := pki.EnsureCA(filepath.Join(p.cfg.DataDir, pkiDir))
	if err != nil {
		return "", err
	}
	for _, c := range natsCerts(host) {
		if err := ca.EnsureCert(c.name, c.hosts, c.usage); err != nil {
			return "", err
		}
	}
	cells := make([]string, len(p.cfg.Cells))
	for i, c := range p.cfg.Cells {
		cells[i] = c.ID
	}
	srv := natsauth.Server{Host: host, Port: port, StoreDir: store,
		Cert: pki.CertFile(ca.Dir, natsCertName), Key: pki.KeyFile(ca.Dir, natsCertName), CA: ca.CertFile(), Cells: cells}
	conf := filepath.Join(p.cfg.DataDir, "nats.conf")
	if err := os.WriteFile(conf, []byte(srv.Config()), 0o600); err != nil {
		return "", err
	}
	return conf, nil
}

// startNATS starts the NATS server, points the cells and the GTR at it, and
// publishes the reference data snapshot.
func (p *Platform) startNATS(ctx context.Context) error {
	host, port, err := net.SplitHostPort(p.cfg.NATSAddr)
	if err != nil {
		return fmt.Errorf("platform: NATSAddr: %w", err)
	}
	portN, err := strconv.Atoi(port)
	if err != nil {
		return fmt.Errorf("platform: NATSAddr: %w", err)
	}
	conf, err := p.writeNATSConfig(host, portN, filepath.Join(p.cfg.DataDir, "nats"))
	if err != nil {
		return fmt.Errorf("platform: NATS: %w", err)
	}
	proc := &Proc{
		Name:    NATS,
		Addr:    p.cfg.NATSAddr,
		path:    p.cfg.NATSServerBin,
		args:    []string{"-c", conf},
		env:     os.Environ(),
		logPath: filepath.Join(p.logDir, NATS+".log"),
		stdout:  newPrefixWriter(NATS, p.cfg.Stdout, &p.outMu),
		stderr:  newPrefixWriter(NATS, p.cfg.Stderr, &p.outMu),
		ready:   p.waitNATS,
	}
	p.procs[NATS] = proc
	p.order = append(p.order, proc)
	if err := proc.start(ctx); err != nil {
		return fmt.Errorf("platform: %w", err)
	}
	if err := p.createAuditStream(ctx); err != nil {
		return fmt.Errorf("platform: NATS: %w", err)
	}
	url := p.NATSURL()
	p.cfg.Env = append(p.cfg.Env, "CELL_NATS_URL="+url, "GTR_NATS_URL="+url,
		"CELL_NATS_CA="+p.CAFile(), "GTR_NATS_CA="+p.CAFile())
	if p.cfg.RefDataSource == "" {
		return nil
	}
	bin := filepath.Join(p.cfg.BinDir, "replicator")
	if _, err := os.Stat(bin); err != nil {
		return fmt.Errorf("platform: replicator: %w", err)
	}
	cmd := exec.CommandContext(ctx, bin, append(p.ReplicatorArgs(), "snapshot", "-source", p.cfg.RefDataSource)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("platform: publishing reference data: %w: %s", err, out)
	}
	return nil
}

// createAuditStream makes (or brings back to natsauth.AuditStreamConfig)
// the GTRs' audit stream as NATS's administrator, before any GTR starts:
// the GTR's own user may create it but never update it, so its limits are
// the administrator's.
func (p *Platform) createAuditStream(ctx context.Context) error {
	opts, err := p.NATSOptions()
	if err != nil {
		return err
	}
	nc, err := nats.Connect(p.NATSURL(), append(opts, nats.Name("cellpay launcher"))...)
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := js.CreateOrUpdateStream(ctx, natsauth.AuditStreamConfig(1)); err != nil {
		return fmt.Errorf("audit stream %s: %w", natsauth.AuditStream, err)
	}
	return nil
}

// waitNATS waits until NATS takes a connection of its administrator (so
// that TLS and authorization are up, not just the port), or it exits.
func (p *Platform) waitNATS(ctx context.Context, exited <-chan struct{}) error {
	opts, err := p.NATSOptions()
	if err != nil {
		return err
	}
	opts = append(opts, nats.Name("cellpay launcher"), nats.Timeout(time.Second))
	for {
		nc, err := nats.Connect(p.NATSURL(), opts...)
		if err == nil {
			nc.Close()
			return nil
		}
		select {
		case <-exited:
			return errExited
		case <-ctx.Done():
			return fmt.Errorf("%w (last connect: %v)", ctx.Err(), err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// natsCerts are NATS's certificates: the server's, for host and loopback,
// and the replicator's and NATS's administrator's client identities. (The
// GTR and the cells present their hop certificates, hopCerts.)
func natsCerts(host string) []certSpec {
	hosts := slices.Clone(loopbackHosts)
	if host != "" && !slices.Contains(hosts, host) {
		hosts = append(hosts, host)
	}
	return []certSpec{
		{natsCertName, hosts, pki.Server},
		{ReplicatorCertName, []string{hop.Replicator}, pki.Client},
		{NATSAdminCertName, []string{hop.NATSAdmin}, pki.Client},
	}
}

// natsReloadTimeout bounds how long reloadNATS waits for NATS to serve
// its new certificate.
const natsReloadTimeout = 10 * time.Second

// reloadNATS has the running NATS server re-read its configuration and
// certificate files (SIGHUP, as nats-server --signal reload does), and
// waits until it presents the certificate now in its file to a new
// connection. Connections already open are kept: they were authenticated
// with the certificate they presented then. Clients present their own
// renewed certificates from their next (re)connect (package natsconn).
func (p *Platform) reloadNATS(ctx context.Context) error {
	proc := p.procs[NATS]
	if proc == nil || !proc.Running() {
		return nil
	}
	want, err := pki.ReadCertificate(pki.CertFile(filepath.Join(p.cfg.DataDir, pkiDir), natsCertName))
	if err != nil {
		return fmt.Errorf("platform: NATS reload: %w", err)
	}
	if err := proc.Signal(syscall.SIGHUP); err != nil {
		return fmt.Errorf("platform: NATS reload: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, natsReloadTimeout)
	defer cancel()
	var last error
	for {
		served, err := p.NATSServedCertificate()
		if err == nil && served.Equal(want) {
			return nil
		}
		last = err
		if err == nil {
			last = fmt.Errorf("it still presents serial %x", served.SerialNumber)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("platform: NATS reload: not serving the new certificate after %v: %v", natsReloadTimeout, last)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// NATSServedCertificate is the leaf certificate NATS presents to a new
// connection of its administrator (hop.NATSAdmin).
func (p *Platform) NATSServedCertificate() (*x509.Certificate, error) {
	opts, err := p.NATSOptions()
	if err != nil {
		return nil, err
	}
	nc, err := nats.Connect(p.NATSURL(), append(opts, nats.Name("cellpay launcher"), nats.Timeout(time.Second))...)
	if err != nil {
		return nil, err
	}
	defer nc.Close()
	cs, err := nc.TLSConnectionState()
	if err != nil {
		return nil, err
	}
	if len(cs.PeerCertificates) == 0 {
		return nil, fmt.Errorf("NATS presented no certificate")
	}
	return cs.PeerCertificates[0], nil
}
