package platform

import (
	"context"
	"crypto/x509"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/cellpay/cellpay/internal/dev/pki"
	"github.com/cellpay/cellpay/internal/hop"
	"github.com/cellpay/cellpay/internal/natsauth"
	"github.com/cellpay/cellpay/internal/natsconn"
)

// FindNATSServer returns the path of a nats-server binary, or "": the one
// make build builds into binDir from the module's own nats-server (the
// version of the Kubernetes manifests' image), else one on the PATH or
// Debian's.
func FindNATSServer(binDir string) string {
	if p := filepath.Join(binDir, "nats-server"); binDir != "" && isFile(p) {
		return p
	}
	if p, err := exec.LookPath("nats-server"); err == nil {
		return p
	}
	if _, err := os.Stat("/usr/sbin/nats-server"); err == nil {
		return "/usr/sbin/nats-server"
	}
	return ""
}

func isFile(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.Mode().IsRegular()
}

// NATSURL is the platform's NATS URL, every server of its cluster listed
// (tls://a,tls://b,tls://c: clients connect to any and move to another
// when it is lost), or "" when it runs without NATS. NATS speaks TLS
// only, and takes only clients with a certificate of the development CA
// whose identity is one of natsauth.Users: dial it with NATSOptions.
func (p *Platform) NATSURL() string {
	if !p.cfg.NATS {
		return ""
	}
	urls := make([]string, p.cfg.NATSServers)
	for i := range urls {
		urls[i] = p.natsURL(i)
	}
	return strings.Join(urls, ",")
}

// natsURL is server i's own URL.
func (p *Platform) natsURL(i int) string { return "tls://" + natsAddr(p.cfg, i, 0) }

// NATSServer is the process name of NATS server i (from 0): nats-1,
// nats-2, ...
func NATSServer(i int) string { return NATS + "-" + strconv.Itoa(i+1) }

// NATSServers are the platform's NATS servers, in order; none without
// NATS.
func (p *Platform) NATSServers() []*Proc {
	var out []*Proc
	for i := range p.cfg.NATSServers {
		if proc := p.procs[NATSServer(i)]; proc != nil {
			out = append(out, proc)
		}
	}
	return out
}

// natsAddr is server i's client address (set 0), route address (set 1)
// or HTTP monitoring address (set 2, with natsmon): NATSAddr's port + i
// for clients, + NATSServers + i for routes, + 2·NATSServers + i for
// monitoring.
func natsAddr(c Config, i, set int) string {
	host, port, _ := net.SplitHostPort(c.NATSAddr)
	n, _ := strconv.Atoi(port)
	return net.JoinHostPort(host, strconv.Itoa(n+set*c.NATSServers+i))
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
// the replicator (hop.Replicator), before its command: every server, and
// a replica on each if it creates the stream.
func (p *Platform) ReplicatorArgs() []string {
	f := p.TLSFiles(ReplicatorCertName)
	return []string{"-nats-url", p.NATSURL(), "-tls-cert", f.Cert, "-tls-key", f.Key, "-tls-ca", f.CA,
		"-replicas", strconv.Itoa(p.cfg.NATSServers)}
}

// writeNATSConfig issues NATS's certificates and writes server i's
// configuration (package natsauth: TLS, a user per component, and in a
// cluster the routes to every member) to DataDir/nats-<n>.conf.
func (p *Platform) writeNATSConfig(i int) (string, error) {
	host, _, err := net.SplitHostPort(p.cfg.NATSAddr)
	if err != nil {
		return "", fmt.Errorf("NATSAddr: %w", err)
	}
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
	name := NATSServer(i)
	_, port, _ := net.SplitHostPort(natsAddr(p.cfg, i, 0))
	portN, _ := strconv.Atoi(port)
	srv := natsauth.Server{Name: name, Host: host, Port: portN, StoreDir: filepath.Join(p.cfg.DataDir, "nats", name),
		Cert: pki.CertFile(ca.Dir, natsCertName), Key: pki.KeyFile(ca.Dir, natsCertName), CA: ca.CertFile(), Cells: cells}
	if p.natsmon() {
		_, mport, _ := net.SplitHostPort(natsAddr(p.cfg, i, 2))
		srv.MonitorPort, _ = strconv.Atoi(mport)
	}
	if p.cfg.NATSServers > 1 {
		_, cport, _ := net.SplitHostPort(natsAddr(p.cfg, i, 1))
		srv.ClusterPort, _ = strconv.Atoi(cport)
		for j := range p.cfg.NATSServers {
			srv.Routes = append(srv.Routes, natsAddr(p.cfg, j, 1))
		}
	}
	conf := filepath.Join(p.cfg.DataDir, name+".conf")
	if err := os.WriteFile(conf, []byte(srv.Config()), 0o600); err != nil {
		return "", err
	}
	return conf, nil
}

// startNATS starts the NATS servers, waits for JetStream to be up across
// them, points the cells and the GTR at every server, and publishes the
// reference data snapshot.
func (p *Platform) startNATS(ctx context.Context) error {
	for i := range p.cfg.NATSServers {
		conf, err := p.writeNATSConfig(i)
		if err != nil {
			return fmt.Errorf("platform: NATS: %w", err)
		}
		name := NATSServer(i)
		url := p.natsURL(i)
		proc := &Proc{
			Name:    name,
			Addr:    natsAddr(p.cfg, i, 0),
			path:    p.cfg.NATSServerBin,
			args:    []string{"-c", conf},
			env:     os.Environ(),
			logPath: filepath.Join(p.logDir, name+".log"),
			stdout:  newPrefixWriter(name, p.cfg.Stdout, &p.outMu),
			stderr:  newPrefixWriter(name, p.cfg.Stderr, &p.outMu),
			ready:   func(ctx context.Context, exited <-chan struct{}) error { return p.waitNATS(ctx, url, exited) },
		}
		p.procs[name] = proc
		p.order = append(p.order, proc)
		if err := proc.start(ctx); err != nil {
			return fmt.Errorf("platform: %w", err)
		}
	}
	if err := p.createAuditStream(ctx); err != nil {
		return fmt.Errorf("platform: NATS: %w", err)
	}
	if p.natsmon() {
		if err := p.startNATSMon(ctx); err != nil {
			return fmt.Errorf("platform: %w", err)
		}
	}
	url := p.NATSURL()
	n := strconv.Itoa(p.cfg.NATSServers)
	p.cfg.Env = append(p.cfg.Env, "CELL_NATS_URL="+url, "GTR_NATS_URL="+url,
		"CELL_NATS_CA="+p.CAFile(), "GTR_NATS_CA="+p.CAFile(),
		// Every stream and bucket the components create has a replica on
		// every server (three by default).
		"CELL_NATS_REPLICAS="+n, "GTR_NATS_REPLICAS="+n)
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

// natsmon says whether the platform runs natsmon: with NATS and metrics.
func (p *Platform) natsmon() bool { return p.cfg.NATS && p.cfg.Metrics }

// NATSMonAddr is where natsmon serves /metrics: NATSAddr's port + 2000,
// as every component's metrics (MetricsAddr); "" when it does not run.
func (p *Platform) NATSMonAddr() string {
	if !p.natsmon() {
		return ""
	}
	return MetricsAddr(p.cfg.NATSAddr)
}

// startNATSMon starts natsmon (cmd/natsmon) watching every NATS server's
// monitoring endpoint, its /metrics on NATSMonAddr, and waits until it
// serves them.
func (p *Platform) startNATSMon(ctx context.Context) error {
	addr := p.NATSMonAddr()
	servers := make([]string, p.cfg.NATSServers)
	for i := range servers {
		servers[i] = NATSServer(i) + "=http://" + natsAddr(p.cfg, i, 2)
	}
	p.add(NATSMon, addr, "natsmon", "-listen", addr, "-servers", strings.Join(servers, ","))
	proc := p.procs[NATSMon]
	proc.ready = func(ctx context.Context, exited <-chan struct{}) error {
		return waitHTTP(ctx, "http://"+addr+"/metrics", exited)
	}
	return proc.start(ctx)
}

// waitHTTP waits until url answers 200, or the process exits.
func waitHTTP(ctx context.Context, url string, exited <-chan struct{}) error {
	client := &http.Client{Timeout: time.Second}
	for {
		resp, err := client.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			err = fmt.Errorf("GET %s: %s", url, resp.Status)
		}
		select {
		case <-exited:
			return errExited
		case <-ctx.Done():
			return fmt.Errorf("%w (last: %v)", ctx.Err(), err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// createAuditStream makes (or brings back to natsauth.AuditStreamConfig)
// the GTRs' audit stream as NATS's administrator, before any GTR starts:
// the GTR's own user may create it but never update it, so its limits are
// the administrator's. It waits (up to 30 s) for JetStream: a cluster's
// servers first elect a leader among themselves.
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
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		// Each request bounded on its own: one sent before the cluster
		// has a leader goes unanswered.
		rctx, rcancel := context.WithTimeout(ctx, 2*time.Second)
		_, err = js.CreateOrUpdateStream(rctx, natsauth.AuditStreamConfig(p.cfg.NATSServers))
		rcancel()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("audit stream %s: %w", natsauth.AuditStream, err)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// waitNATS waits until the NATS server at url takes a connection of its
// administrator (so that TLS and authorization are up, not just the
// port), or it exits.
func (p *Platform) waitNATS(ctx context.Context, url string, exited <-chan struct{}) error {
	opts, err := p.NATSOptions()
	if err != nil {
		return err
	}
	opts = append(opts, nats.Name("cellpay launcher"), nats.Timeout(time.Second))
	for {
		nc, err := nats.Connect(url, opts...)
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
	hosts := append(slices.Clone(loopbackHosts), hop.NATS)
	if host != "" && !slices.Contains(hosts, host) {
		hosts = append(hosts, host)
	}
	return []certSpec{
		// Server and client: a cluster's routes are mutual TLS with it.
		{natsCertName, hosts, pki.Server | pki.Client},
		{ReplicatorCertName, []string{hop.Replicator}, pki.Client},
		{NATSAdminCertName, []string{hop.NATSAdmin}, pki.Client},
	}
}

// natsReloadTimeout bounds how long reloadNATS waits for NATS to serve
// its new certificate.
const natsReloadTimeout = 10 * time.Second

// reloadNATS has every running NATS server re-read its configuration and
// certificate files (SIGHUP, as nats-server --signal reload does), and
// waits until each presents the certificate now in its file to a new
// connection. Connections already open are kept: they were authenticated
// with the certificate they presented then. Clients present their own
// renewed certificates from their next (re)connect (package natsconn).
func (p *Platform) reloadNATS(ctx context.Context) error {
	want, err := pki.ReadCertificate(pki.CertFile(filepath.Join(p.cfg.DataDir, pkiDir), natsCertName))
	if err != nil {
		return fmt.Errorf("platform: NATS reload: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, natsReloadTimeout)
	defer cancel()
	for i, proc := range p.NATSServers() {
		if !proc.Running() {
			continue
		}
		if err := proc.Signal(syscall.SIGHUP); err != nil {
			return fmt.Errorf("platform: NATS reload: %s: %w", proc.Name, err)
		}
		var last error
		for {
			served, err := p.servedCertificate(p.natsURL(i))
			if err == nil && served.Equal(want) {
				break
			}
			last = err
			if err == nil {
				last = fmt.Errorf("it still presents serial %x", served.SerialNumber)
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("platform: NATS reload: %s not serving the new certificate after %v: %v", proc.Name, natsReloadTimeout, last)
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
	return nil
}

// NATSServedCertificate is the leaf certificate the first NATS server
// presents to a new connection of its administrator (hop.NATSAdmin).
func (p *Platform) NATSServedCertificate() (*x509.Certificate, error) {
	return p.servedCertificate(p.natsURL(0))
}

func (p *Platform) servedCertificate(url string) (*x509.Certificate, error) {
	opts, err := p.NATSOptions()
	if err != nil {
		return nil, err
	}
	nc, err := nats.Connect(url, append(opts, nats.Name("cellpay launcher"), nats.Timeout(time.Second))...)
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
