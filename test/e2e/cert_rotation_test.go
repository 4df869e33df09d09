package e2e

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"math/big"
	"net"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/cellpay/cellpay/internal/dev/load"
	"github.com/cellpay/cellpay/internal/dev/pgcluster"
	"github.com/cellpay/cellpay/internal/dev/pki"
	"github.com/cellpay/cellpay/internal/dev/platform"
	"github.com/cellpay/cellpay/internal/dev/testutil"
	"github.com/cellpay/cellpay/internal/natsauth"
	"github.com/cellpay/cellpay/internal/natsconn"
	"github.com/cellpay/cellpay/internal/tlsconf"
)

// TestCertificatesRotateUnderLoad replaces every certificate and key file
// of the platform in place (Platform.RotateCertificates) while partners'
// traffic runs: no transaction fails, no process restarts (components,
// NATS, every Postgres node), and then
//   - every gRPC server (GTR, cells, issuer) presents its new certificate
//     to a new connection within the reload period;
//   - NATS presents its new certificate; a new connection with the
//     replicator's new certificate is taken with the replicator's
//     permissions (its stream readable, another's subject refused);
//   - a NATS connection opened before with a cell's certificate, the way
//     the cell connects (natsconn), presents the cell's new certificate
//     when it reconnects, and is taken with the cell's permissions;
//   - each cell's Postgres, primary and standby, presents its new
//     certificate to a new verify-full connection.
func TestCertificatesRotateUnderLoad(t *testing.T) {
	ctx := ctxFor(t, 3*time.Minute)
	if env.p.NATSURL() == "" {
		t.Fatal("the platform runs without NATS (nats-server missing?): its rotation cannot be checked")
	}
	servers := map[string]string{platform.GTR: env.gtrAddr, platform.IssuerSim: env.p.Config().IssuerAddr}
	for _, c := range env.cells {
		servers[c.ID] = cellAddr(t, c.ID)
	}
	pids := map[string]int{}
	for name := range servers {
		pids[name] = env.p.Process(name).Pid()
	}
	for _, n := range env.p.NATSServers() {
		pids[n.Name] = n.Pid()
	}
	pgPids := map[string]int{}
	pgNodes := map[string]string{} // node -> database URL of that node alone
	for _, c := range env.cells {
		prim, sb := env.p.Postgres(c.ID), env.p.Standby(c.ID)
		if prim == nil || sb == nil {
			t.Fatalf("%s: primary %v, standby %v: want both", c.ID, prim, sb)
		}
		for node, pc := range map[string]*pgcluster.Cluster{c.ID + " primary": prim, c.ID + " standby": sb} {
			pgPids[node] = pc.Pid()
			pgNodes[node] = nodeURL(t, env.p.CellDatabaseURL(c.ID), pc.Port())
		}
	}
	pgCert := func(node string) string {
		return env.p.TLSFiles("postgres-" + strings.Fields(node)[0]).Cert
	}
	for node, u := range pgNodes {
		if served, file := pgServedSerial(t, ctx, u), fileSerial(t, pgCert(node)); served.Cmp(file) != 0 {
			t.Fatalf("%s serves serial %x, its file holds %x", node, served, file)
		}
	}
	natsFile := env.p.TLSFiles("nats").Cert
	natsBefore := natsServedSerial(t)
	if file := fileSerial(t, natsFile); file.Cmp(natsBefore) != 0 {
		t.Fatalf("NATS serves serial %x, its file holds %x", natsBefore, file)
	}
	// A cell's NATS identity, connected before the rotation as the cell's
	// own connections are.
	cell := env.cells[0].ID
	cellNC, cellPresented, reconnected := natsConnRecording(t, env.p.TLSFiles(cell), nil)
	defer cellNC.Close()
	if got, file := cellPresented(), fileSerial(t, env.p.TLSFiles(cell).Cert); got.Cmp(file) != 0 {
		t.Fatalf("%s's NATS connection presented %x, its file holds %x", cell, got, file)
	}
	certName := func(server string) string {
		switch server {
		case platform.GTR:
			return "gtr"
		case platform.IssuerSim:
			return platform.IssuerCertName
		}
		return server
	}
	before := map[string]*big.Int{}
	for name, addr := range servers {
		before[name] = servedSerial(t, addr)
		if file := fileSerial(t, env.p.TLSFiles(certName(name)).Cert); file.Cmp(before[name]) != 0 {
			t.Fatalf("%s serves serial %x, its file holds %x", name, before[name], file)
		}
	}

	var failed atomic.Int64
	done := make(chan load.Report, 1)
	go func() {
		rep, err := load.Run(ctx, load.Config{
			Target: load.TargetGTR, Addr: env.gtrAddr, Mode: load.ModeOpen, Rate: 30, Concurrency: 64,
			Count: 750, Duration: 25 * time.Second, Seed: 11, RunID: runID + "-certrot",
			DialOptions: env.gtrOpts,
			OnResult: func(r load.Result) {
				if r.Err != nil {
					failed.Add(1)
				}
			},
		}, nil)
		if err != nil {
			t.Error(err)
		}
		done <- rep
	}()
	time.Sleep(2 * time.Second)
	if err := env.p.RotateCertificates(); err != nil {
		t.Fatal(err)
	}
	for name, addr := range servers {
		want := fileSerial(t, env.p.TLSFiles(certName(name)).Cert)
		if want.Cmp(before[name]) == 0 {
			t.Fatalf("%s: the rotated file has the old serial", name)
		}
		testutil.Eventually(t, 2*tlsconf.DefaultRefresh+5*time.Second, name+" serves its new certificate", func() bool {
			return servedSerial(t, addr).Cmp(want) == 0
		})
	}
	checkNATSRotated(t, ctx, natsBefore, natsFile, cell, cellNC, cellPresented, reconnected)
	for node, u := range pgNodes {
		want := fileSerial(t, pgCert(node))
		testutil.Eventually(t, 10*time.Second, node+" serves its new certificate", func() bool {
			return pgServedSerial(t, ctx, u).Cmp(want) == 0
		})
	}
	rep := <-done
	if failed.Load() != 0 || rep.Completed < 500 {
		t.Fatalf("rotation under load: %d failed, %d completed, errors %v", failed.Load(), rep.Completed, rep.Errors)
	}
	for name, pid := range pids {
		if now := env.p.Process(name).Pid(); now != pid {
			t.Fatalf("%s restarted (pid %d, then %d)", name, pid, now)
		}
	}
	for node, pid := range pgPids {
		c := env.p.Postgres(strings.Fields(node)[0])
		if strings.HasSuffix(node, "standby") {
			c = env.p.Standby(strings.Fields(node)[0])
		}
		if c == nil || c.Pid() != pid {
			t.Fatalf("%s restarted or failed over (pid %d, then %v)", node, pid, c)
		}
	}
	t.Logf("rotation under load: %d completed, 0 failed, %d gRPC servers, NATS, its clients and %d Postgres nodes on new certificates, no restart",
		rep.Completed, len(servers), len(pgNodes))
}

// checkNATSRotated checks NATS after RotateCertificates (which waits for
// NATS to reload): NATS serves its new certificate; the replicator's new
// certificate is taken, with its permissions; the cell's connection,
// made before, presents the cell's new certificate on a reconnect and is
// taken with the cell's permissions.
func checkNATSRotated(t *testing.T, ctx context.Context, before *big.Int, natsFile, cell string, cellNC *nats.Conn, cellPresented func() *big.Int, reconnected <-chan struct{}) {
	t.Helper()
	want := fileSerial(t, natsFile)
	if want.Cmp(before) == 0 {
		t.Fatal("NATS: the rotated file has the old serial")
	}
	if got := natsServedSerial(t); got.Cmp(want) != 0 {
		t.Fatalf("NATS serves %x after the rotation, its new file holds %x", got, want)
	}

	repFiles := env.p.TLSFiles(platform.ReplicatorCertName)
	violations := make(chan error, 4)
	rep, repPresented, _ := natsConnRecording(t, repFiles, violations)
	defer rep.Close()
	if got, file := repPresented(), fileSerial(t, repFiles.Cert); got.Cmp(file) != 0 {
		t.Fatalf("the replicator's new connection presented %x, its new file holds %x", got, file)
	}
	rjs, _ := jetstream.New(rep)
	if _, err := rjs.Stream(ctx, natsauth.RefdataStream); err != nil {
		t.Fatalf("the replicator's new certificate cannot read its stream: %v", err)
	}
	if err := rep.Publish(natsauth.AuditSubjectPrefix+"rotation", []byte("{}")); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-violations:
		if !errors.Is(err, nats.ErrPermissionViolation) {
			t.Fatalf("the replicator publishing to the audit log: %v; want a permissions violation", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the replicator's new certificate published to the audit log without a permissions violation")
	}

	cellFile := fileSerial(t, env.p.TLSFiles(cell).Cert)
	if cellPresented().Cmp(cellFile) == 0 {
		t.Fatalf("%s's NATS connection presented its new certificate before it reconnected", cell)
	}
	if err := cellNC.ForceReconnect(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-reconnected:
	case <-time.After(10 * time.Second):
		t.Fatalf("%s's NATS connection did not reconnect within 10s (last error %v)", cell, cellNC.LastError())
	}
	if got := cellPresented(); got.Cmp(cellFile) != 0 {
		t.Fatalf("%s's NATS connection presented %x on its reconnect, its new file holds %x", cell, got, cellFile)
	}
	cjs, _ := jetstream.New(cellNC)
	kv, err := cjs.KeyValue(ctx, natsauth.GTRBucket)
	if err != nil {
		t.Fatalf("%s, reconnected with its new certificate, cannot read the GTR's bucket: %v", cell, err)
	}
	if _, err := kv.Get(ctx, "routing"); err != nil {
		t.Fatalf("%s, reconnected with its new certificate: routing entry: %v", cell, err)
	}
}

// natsConnRecording connects to the platform's NATS with files as
// natsconn does (the certificate read at each handshake), and records the
// serial of the certificate each handshake presented. Permission errors
// go to violations when it is not nil; reconnected receives a value at
// each reconnect.
func natsConnRecording(t *testing.T, files tlsconf.Files, violations chan<- error) (*nats.Conn, func() *big.Int, <-chan struct{}) {
	t.Helper()
	opts, err := natsconn.TLSOptions(files)
	if err != nil {
		t.Fatal(err)
	}
	var presented atomic.Pointer[big.Int]
	record := func(o *nats.Options) error {
		inner := o.TLSCertCB
		if inner == nil {
			return errors.New("natsconn set no certificate callback")
		}
		o.TLSCertCB = func() (tls.Certificate, error) {
			pair, err := inner()
			if err == nil {
				leaf, perr := x509.ParseCertificate(pair.Certificate[0])
				if perr != nil {
					return pair, perr
				}
				presented.Store(leaf.SerialNumber)
			}
			return pair, err
		}
		return nil
	}
	reconnected := make(chan struct{}, 4)
	opts = append(opts, record, nats.Timeout(2*time.Second), nats.ReconnectWait(100*time.Millisecond), nats.MaxReconnects(-1),
		nats.ReconnectHandler(func(*nats.Conn) {
			select {
			case reconnected <- struct{}{}:
			default:
			}
		}),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			if violations != nil {
				select {
				case violations <- err:
				default:
				}
			}
		}))
	nc, err := nats.Connect(env.p.NATSURL(), opts...)
	if err != nil {
		t.Fatalf("NATS as %s: %v", files.Cert, err)
	}
	return nc, func() *big.Int { return presented.Load() }, reconnected
}

// natsServedSerial is the serial of the certificate NATS presents to a new
// connection.
func natsServedSerial(t *testing.T) *big.Int {
	t.Helper()
	c, err := env.p.NATSServedCertificate()
	if err != nil {
		t.Fatal(err)
	}
	return c.SerialNumber
}

// nodeURL is the cell's database URL on one node alone (port), verify-full
// as the cell's is.
func nodeURL(t *testing.T, cellURL string, port int) string {
	t.Helper()
	u, err := url.Parse(cellURL)
	if err != nil {
		t.Fatal(err)
	}
	u.Host = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	q := u.Query()
	q.Del("target_session_attrs")
	// The cells' own URL gives up after 2 s and retries; this probe asks
	// once, and a loaded host can take longer than that to fork a backend
	// and finish its TLS handshake.
	q.Set("connect_timeout", "10")
	u.RawQuery = q.Encode()
	return u.String()
}

// pgServedSerial is the serial of the certificate the Postgres at u
// presents to a new connection (u verifies it: sslmode=verify-full).
func pgServedSerial(t *testing.T, ctx context.Context, u string) *big.Int {
	t.Helper()
	conn, err := pgx.Connect(ctx, u)
	if err != nil {
		t.Fatalf("Postgres %s: %v", platform.RedactURL(u), err)
	}
	defer conn.Close(context.Background())
	tc, ok := conn.PgConn().Conn().(*tls.Conn)
	if !ok {
		t.Fatalf("Postgres %s: connection is %T, not TLS", platform.RedactURL(u), conn.PgConn().Conn())
	}
	return tc.ConnectionState().PeerCertificates[0].SerialNumber
}

// servedSerial is the serial of the certificate addr presents to a new
// TLS connection (with the tools' client certificate, which every internal
// server takes).
func servedSerial(t *testing.T, addr string) *big.Int {
	t.Helper()
	pool, err := tlsconf.CertPool(env.p.CAFile())
	if err != nil {
		t.Fatal(err)
	}
	f := env.p.TLSFiles(platform.OpsCertName)
	cert, err := tls.LoadX509KeyPair(f.Cert, f.Key)
	if err != nil {
		t.Fatal(err)
	}
	c, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}, NextProtos: []string{"h2"}, MinVersion: tls.VersionTLS12})
	if err != nil {
		t.Fatalf("TLS to %s: %v", addr, err)
	}
	defer c.Close()
	return c.ConnectionState().PeerCertificates[0].SerialNumber
}

func fileSerial(t *testing.T, path string) *big.Int {
	t.Helper()
	c, err := pki.ReadCertificate(path)
	if err != nil {
		t.Fatal(err)
	}
	return c.SerialNumber
}
