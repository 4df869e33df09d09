package natsauth_test

import (
	"context"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/cellpay/cellpay/internal/dev/pki"
	"github.com/cellpay/cellpay/internal/dev/platform"
	"github.com/cellpay/cellpay/internal/dev/testutil"
	"github.com/cellpay/cellpay/internal/hop"
	"github.com/cellpay/cellpay/internal/jsconf"
	"github.com/cellpay/cellpay/internal/natsauth"
	"github.com/cellpay/cellpay/internal/natsconn"
	"github.com/cellpay/cellpay/internal/refdata"
	"github.com/cellpay/cellpay/internal/tlsconf"
)

// server runs the nats-server binary that make run runs, configured by
// natsauth for cells cell-a and cell-b, with certificates of one CA for
// every identity, one of another CA claiming to be the GTR, and one of the
// CA with an identity that is no user (ops).
type server struct {
	url   string
	dir   string
	files func(name string) tlsconf.Files
}

func start(t *testing.T) *server {
	t.Helper()
	bin := platform.FindNATSServer(testutil.PrebuiltBin())
	if bin == "" {
		t.Fatal("nats-server is not installed (apt-get install nats-server; .ci/run does)")
	}
	dir := t.TempDir()
	ca, err := pki.EnsureCA(dir)
	if err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]struct {
		hosts []string
		usage pki.Usage
	}{
		"nats":       {[]string{"127.0.0.1", hop.NATS}, pki.Server},
		"gtr":        {[]string{hop.GTR}, pki.Client},
		"cell-a":     {[]string{hop.Cell("cell-a")}, pki.Client},
		"cell-b":     {[]string{hop.Cell("cell-b")}, pki.Client},
		"replicator": {[]string{hop.Replicator}, pki.Client},
		"admin":      {[]string{hop.NATSAdmin}, pki.Client},
		"ops":        {[]string{hop.Ops}, pki.Client},
	} {
		if err := ca.Issue(name, c.hosts, c.usage); err != nil {
			t.Fatal(err)
		}
	}
	other, err := pki.EnsureCA(filepath.Join(dir, "other"))
	if err != nil {
		t.Fatal(err)
	}
	if err := other.Issue("gtr", []string{hop.GTR}, pki.Client); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	srv := natsauth.Server{Host: "127.0.0.1", Port: port, StoreDir: filepath.Join(dir, "js"),
		Cert: pki.CertFile(dir, "nats"), Key: pki.KeyFile(dir, "nats"), CA: ca.CertFile(), Cells: []string{"cell-a", "cell-b"}}
	conf := filepath.Join(dir, "nats.conf")
	if err := os.WriteFile(conf, []byte(srv.Config()), 0o600); err != nil {
		t.Fatal(err)
	}
	logf, err := os.Create(filepath.Join(dir, "nats.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-c", conf)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-done; logf.Close() })
	addr := "127.0.0.1:" + strconv.Itoa(port)
	deadline := time.Now().Add(15 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err == nil {
			c.Close()
			break
		}
		select {
		case <-done:
			b, _ := os.ReadFile(filepath.Join(dir, "nats.log"))
			t.Fatalf("nats-server exited:\n%s", b)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("nats-server not listening on %s within 15s", addr)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return &server{url: "tls://" + addr, dir: dir, files: func(name string) tlsconf.Files {
		d := dir
		if name == "forged-gtr" {
			d, name = filepath.Join(dir, "other"), "gtr"
		}
		return tlsconf.Files{Cert: pki.CertFile(d, name), Key: pki.KeyFile(d, name), CA: ca.CertFile()}
	}}
}

// violations collects a connection's asynchronous errors (permission
// violations arrive that way).
type violations chan error

func (s *server) connect(t *testing.T, name string) (*nats.Conn, violations) {
	t.Helper()
	opts, err := natsconn.TLSOptions(s.files(name))
	if err != nil {
		t.Fatal(err)
	}
	v := make(violations, 64)
	nc, err := nats.Connect(s.url, append(opts, nats.Timeout(5*time.Second),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			select {
			case v <- err:
			default:
			}
		}))...)
	if err != nil {
		t.Fatalf("%s: connect: %v", name, err)
	}
	t.Cleanup(nc.Close)
	return nc, v
}

// expectViolation waits, with a bound, for a permissions violation naming
// subject.
func (v violations) expectViolation(t *testing.T, subject string) {
	t.Helper()
	timeout := time.After(5 * time.Second)
	for {
		select {
		case err := <-v:
			if errors.Is(err, nats.ErrPermissionViolation) && strings.Contains(err.Error(), subject) {
				return
			}
		case <-timeout:
			t.Fatalf("no permissions violation for %q within 5s", subject)
		}
	}
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return c
}

// denied is the context of a request expected to be refused: the server
// drops a request it does not permit, so it ends at this bound.
func denied(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	t.Cleanup(cancel)
	return c
}

func TestRefusesWhoIsNoUser(t *testing.T) {
	s := start(t)
	// No certificate: the handshake fails (the server requires one).
	if nc, err := nats.Connect(s.url, nats.RootCAs(s.files("gtr").CA), nats.Timeout(3*time.Second)); err == nil {
		nc.Close()
		t.Fatal("a client without a certificate connected")
	}
	// Plaintext: refused (the server speaks TLS only).
	if nc, err := nats.Connect(strings.Replace(s.url, "tls://", "nats://", 1), nats.Timeout(3*time.Second)); err == nil {
		nc.Close()
		t.Fatal("a plaintext client connected")
	}
	// A certificate of the CA whose identity is no user, and the GTR's
	// identity from another CA.
	for _, name := range []string{"ops", "forged-gtr"} {
		opts, err := natsconn.TLSOptions(s.files(name))
		if err != nil {
			t.Fatal(err)
		}
		if nc, err := nats.Connect(s.url, append(opts, nats.Timeout(3*time.Second))...); err == nil {
			nc.Close()
			t.Fatalf("%s connected", name)
		}
	}
}

func TestCellCannotPublishReferenceDataOrRoute(t *testing.T) {
	s := start(t)
	// The GTR makes its bucket and writes the routing table; the
	// replicator makes the reference data stream and publishes version 1.
	gtr, _ := s.connect(t, "gtr")
	gjs, _ := jetstream.New(gtr)
	kv, err := gjs.CreateKeyValue(ctx(t), jetstream.KeyValueConfig{Bucket: natsauth.GTRBucket})
	if err != nil {
		t.Fatalf("gtr: create its bucket: %v", err)
	}
	if _, err := kv.Put(ctx(t), "routing", []byte("the table")); err != nil {
		t.Fatalf("gtr: put: %v", err)
	}
	status, err := gtr.SubscribeSync(natsauth.StatusPrefix + "*")
	if err != nil {
		t.Fatal(err)
	}
	rep, _ := s.connect(t, "replicator")
	rjs, _ := jetstream.New(rep)
	stream, err := rjs.CreateStream(ctx(t), jetstream.StreamConfig{Name: natsauth.RefdataStream, Subjects: []string{natsauth.RefdataSubject}})
	if err != nil {
		t.Fatalf("replicator: create the stream: %v", err)
	}
	if _, err := rjs.Publish(ctx(t), natsauth.RefdataSubject, []byte("v1")); err != nil {
		t.Fatalf("replicator: publish: %v", err)
	}
	if err := gtr.Flush(); err != nil {
		t.Fatal(err)
	}

	cell, v := s.connect(t, "cell-a")
	cjs, _ := jetstream.New(cell)
	// Publishing reference data, on core NATS or through JetStream.
	if err := cell.Publish(natsauth.RefdataSubject, []byte("forged")); err != nil {
		t.Fatal(err)
	}
	v.expectViolation(t, natsauth.RefdataSubject)
	if _, err := cjs.Publish(denied(t), natsauth.RefdataSubject, []byte("forged")); err == nil {
		t.Fatal("cell-a published reference data through JetStream")
	}
	// Writing the routing table, deleting or purging the stream.
	ckv, err := cjs.KeyValue(ctx(t), natsauth.GTRBucket)
	if err != nil {
		t.Fatalf("cell-a: open the GTR's bucket to read it: %v", err)
	}
	// The routing entry's subject: through the KV API (a JetStream
	// publish, which the server drops: the call only times out) and as a
	// core publish, each refused with a permissions violation naming it.
	routingSubject := "$KV." + natsauth.GTRBucket + ".routing"
	before, err := ckv.Get(ctx(t), "routing")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ckv.Put(denied(t), "routing", []byte("forged table")); err == nil {
		t.Fatal("cell-a wrote the routing table")
	}
	v.expectViolation(t, routingSubject)
	if err := cell.Publish(routingSubject, []byte("forged table")); err != nil {
		t.Fatal(err)
	}
	v.expectViolation(t, routingSubject)
	if e, err := kv.Get(ctx(t), "routing"); err != nil || e.Revision() != before.Revision() || string(e.Value()) != "the table" {
		t.Fatalf("routing entry after cell-a's writes: %v, %v; want revision %d, \"the table\"", e, err, before.Revision())
	}
	if err := cjs.DeleteStream(denied(t), natsauth.RefdataStream); err == nil {
		t.Fatal("cell-a deleted the reference data stream")
	}
	if err := cjs.DeleteKeyValue(denied(t), natsauth.GTRBucket); err == nil {
		t.Fatal("cell-a deleted the GTR's bucket")
	}
	// Another cell's status subject, and another identity's inbox.
	if err := cell.Publish(natsauth.StatusPrefix+"cell-b", []byte(`{"cell":"cell-b","version":99}`)); err != nil {
		t.Fatal(err)
	}
	v.expectViolation(t, natsauth.StatusPrefix+"cell-b")
	if _, err := cell.SubscribeSync(natsauth.InboxPrefix(hop.GTR) + ".>"); err != nil {
		t.Fatal(err)
	}
	v.expectViolation(t, natsauth.InboxPrefix(hop.GTR))

	// What it may do: report its own status, read the table, read
	// reference data through its own consumer.
	if err := cell.Publish(natsauth.StatusPrefix+"cell-a", []byte(`{"cell":"cell-a","version":1}`)); err != nil {
		t.Fatal(err)
	}
	m, err := status.NextMsg(5 * time.Second)
	if err != nil || m.Subject != natsauth.StatusPrefix+"cell-a" {
		t.Fatalf("the GTR's first status report: %v, %v; want cell-a's only (cell-b's was forged)", m, err)
	}
	if e, err := ckv.Get(ctx(t), "routing"); err != nil || string(e.Value()) != "the table" {
		t.Fatalf("routing table after cell-a's attempts: %v, %v; want unchanged", e, err)
	}
	cons, err := cjs.CreateOrUpdateConsumer(ctx(t), natsauth.RefdataStream, jetstream.ConsumerConfig{Durable: "cell-cell-a", AckPolicy: jetstream.AckExplicitPolicy})
	if err != nil {
		t.Fatalf("cell-a: its consumer: %v", err)
	}
	msg, err := cons.Next(jetstream.FetchMaxWait(5 * time.Second))
	if err != nil || string(msg.Data()) != "v1" {
		t.Fatalf("cell-a reads: %v, %v", msg, err)
	}
	if err := msg.Ack(); err != nil {
		t.Fatal(err)
	}
	if _, err := cjs.CreateOrUpdateConsumer(denied(t), natsauth.RefdataStream, jetstream.ConsumerConfig{Durable: "cell-cell-b"}); err == nil {
		t.Fatal("cell-a made cell-b's consumer")
	}
	info, err := stream.Info(ctx(t))
	if err != nil || info.State.Msgs != 1 {
		t.Fatalf("stream after cell-a's attempts: %+v, %v; want the one version", info, err)
	}
	// The transaction directory: any transaction's entry (readers judge
	// each by its owner's signature), its own signing certificates, and
	// never another cell's.
	dir, err := cjs.CreateKeyValue(ctx(t), jetstream.KeyValueConfig{Bucket: natsauth.DirectoryBucket})
	if err != nil {
		t.Fatalf("cell-a: the directory bucket: %v", err)
	}
	if _, err := dir.Create(ctx(t), "t.k", []byte("owner cell-a")); err != nil {
		t.Fatalf("cell-a: claim: %v", err)
	}
	if _, err := dir.Put(ctx(t), "c.cell-a.0a1b", []byte("cell-a's certificate")); err != nil {
		t.Fatalf("cell-a: its certificate: %v", err)
	}
	if _, err := dir.Put(denied(t), "c.cell-b.0a1b", []byte("forged")); err == nil {
		t.Fatal("cell-a put a certificate where readers look for cell-b's")
	}
	v.expectViolation(t, "$KV."+natsauth.DirectoryBucket+".c.cell-b.0a1b")
	if _, err := dir.Put(denied(t), "other", []byte("forged")); err == nil {
		t.Fatal("cell-a wrote a key of the directory that is neither an entry nor its certificate")
	}
	if _, err := dir.Put(denied(t), "r.cell-b", []byte("forged")); err == nil {
		t.Fatal("cell-a declared cell-b lost: it could then take over cell-b's entries")
	}
	// The GTR writes release records, and no entry.
	gtrc, gv := s.connect(t, "gtr")
	gjs2, _ := jetstream.New(gtrc)
	gdir, err := gjs2.KeyValue(ctx(t), natsauth.DirectoryBucket)
	if err != nil {
		t.Fatalf("gtr: the directory bucket: %v", err)
	}
	if _, err := gdir.Put(ctx(t), "r.cell-b", []byte(`{"cell":"cell-b"}`)); err != nil {
		t.Fatalf("gtr: release cell-b: %v", err)
	}
	if _, err := gdir.Put(denied(t), "t.k", []byte("forged")); err == nil {
		t.Fatal("the GTR wrote a directory entry")
	}
	gv.expectViolation(t, "$KV."+natsauth.DirectoryBucket+".t.k")
}

func TestGTRCannotPublishReferenceData(t *testing.T) {
	s := start(t)
	gtr, v := s.connect(t, "gtr")
	if err := gtr.Publish(natsauth.RefdataSubject, []byte("forged")); err != nil {
		t.Fatal(err)
	}
	v.expectViolation(t, natsauth.RefdataSubject)
	if err := gtr.Publish(natsauth.StatusPrefix+"cell-a", []byte("forged")); err != nil {
		t.Fatal(err)
	}
	v.expectViolation(t, natsauth.StatusPrefix+"cell-a")
}

// TestGTRCannotShrinkItsAuditStream: the GTR publishes to and reads the
// audit stream the administrator made, and may ask to create it (with the
// same configuration: a no-op), but cannot update, purge or delete it,
// nor create it with other limits.
func TestGTRCannotShrinkItsAuditStream(t *testing.T) {
	s := start(t)
	admin, _ := s.connect(t, "admin")
	ajs, _ := jetstream.New(admin)
	stream, err := ajs.CreateStream(ctx(t), natsauth.AuditStreamConfig(1))
	if err != nil {
		t.Fatalf("admin: create the audit stream: %v", err)
	}
	want, err := stream.Info(ctx(t))
	if err != nil {
		t.Fatal(err)
	}

	gtr, v := s.connect(t, "gtr")
	gjs, _ := jetstream.New(gtr)
	if _, err := gjs.CreateStream(ctx(t), natsauth.AuditStreamConfig(1)); err != nil {
		t.Fatalf("gtr: create the existing stream with its configuration: %v", err)
	}
	if _, err := gjs.Publish(ctx(t), natsauth.AuditSubjectPrefix+"gtr-1", []byte(`{"id":"1"}`)); err != nil {
		t.Fatalf("gtr: publish a record: %v", err)
	}
	gst, err := gjs.Stream(ctx(t), natsauth.AuditStream)
	if err != nil {
		t.Fatalf("gtr: read the stream: %v", err)
	}
	if m, err := gst.GetLastMsgForSubject(ctx(t), natsauth.AuditSubjectPrefix+"gtr-1"); err != nil || string(m.Data) != `{"id":"1"}` {
		t.Fatalf("gtr: read its record: %v, %v", m, err)
	}

	shrunk := natsauth.AuditStreamConfig(1)
	shrunk.MaxMsgs, shrunk.MaxAge = 1, time.Hour
	if _, err := gjs.UpdateStream(denied(t), shrunk); err == nil {
		t.Fatal("gtr updated the audit stream")
	}
	v.expectViolation(t, "$JS.API.STREAM.UPDATE."+natsauth.AuditStream)
	if _, err := gjs.CreateStream(ctx(t), shrunk); !errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
		t.Fatalf("gtr: create the stream with other limits: %v; want %v", err, jetstream.ErrStreamNameAlreadyInUse)
	}
	if err := gst.Purge(denied(t)); err == nil {
		t.Fatal("gtr purged the audit stream")
	}
	v.expectViolation(t, "$JS.API.STREAM.PURGE."+natsauth.AuditStream)
	if err := gjs.DeleteStream(denied(t), natsauth.AuditStream); err == nil {
		t.Fatal("gtr deleted the audit stream")
	}
	v.expectViolation(t, "$JS.API.STREAM.DELETE."+natsauth.AuditStream)
	if err := gst.DeleteMsg(denied(t), 1); err == nil {
		t.Fatal("gtr deleted an audit record")
	}
	v.expectViolation(t, "$JS.API.STREAM.MSG.DELETE."+natsauth.AuditStream)

	got, err := stream.Info(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	if got.Config.MaxMsgs != want.Config.MaxMsgs || got.Config.MaxAge != want.Config.MaxAge || got.State.Msgs != 1 {
		t.Fatalf("audit stream after the GTR's attempts: max msgs %d, max age %v, %d records; want %d, %v, 1",
			got.Config.MaxMsgs, got.Config.MaxAge, got.State.Msgs, want.Config.MaxMsgs, want.Config.MaxAge)
	}
}

// TestCellCannotChangeTheDirectory: a cell creates the transaction
// directory's bucket when nobody has (package jsconf, with its limits),
// but may not change it once it exists: NATS refuses the update, so an
// operator's limits (set as NATS's administrator) stay whatever a
// component would have created, and the cell opening it again keeps them
// and reports the difference.
func TestCellCannotChangeTheDirectory(t *testing.T) {
	s := start(t)
	cell, v := s.connect(t, "cell-a")
	cjs, _ := jetstream.New(cell)
	mine := jsconf.Limits{Replicas: 1, MaxAge: 24 * time.Hour, MaxBytes: 1 << 20}
	kvcfg := jetstream.KeyValueConfig{Bucket: natsauth.DirectoryBucket, History: 1}
	if _, differs, err := jsconf.OpenKeyValue(ctx(t), cjs, kvcfg, mine); err != nil || differs != nil {
		t.Fatalf("cell: create the directory bucket: %v (differences %v)", err, differs)
	}
	stream := "KV_" + natsauth.DirectoryBucket

	// The operator raises the size limit and shortens the age.
	admin, _ := s.connect(t, "admin")
	ajs, _ := jetstream.New(admin)
	ast, err := ajs.Stream(ctx(t), stream)
	if err != nil {
		t.Fatal(err)
	}
	opCfg := ast.CachedInfo().Config
	opCfg.MaxBytes, opCfg.MaxAge = 8<<20, 12*time.Hour
	if _, err := ajs.UpdateStream(ctx(t), opCfg); err != nil {
		t.Fatalf("admin: update the bucket: %v", err)
	}

	// The cell starts again: it keeps the operator's limits and says how
	// they differ from its own; and it may not write its own back.
	_, differs, err := jsconf.OpenKeyValue(ctx(t), cjs, kvcfg, mine)
	if err != nil {
		t.Fatalf("cell: open the changed bucket: %v", err)
	}
	if got := strings.Join(differs, "; "); got != "max age 12h0m0s, want 24h0m0s; max bytes 8388608, want 1048576" {
		t.Fatalf("differences reported: %q", got)
	}
	back := opCfg
	back.MaxBytes, back.MaxAge = mine.MaxBytes, mine.MaxAge
	if _, err := cjs.UpdateStream(denied(t), back); err == nil {
		t.Fatal("cell updated the directory's bucket")
	}
	v.expectViolation(t, "$JS.API.STREAM.UPDATE."+stream)
	if err := cjs.DeleteStream(denied(t), stream); err == nil {
		t.Fatal("cell deleted the directory's bucket")
	}
	v.expectViolation(t, "$JS.API.STREAM.DELETE."+stream)
	got, err := ajs.Stream(ctx(t), stream)
	if err != nil {
		t.Fatal(err)
	}
	if c := got.CachedInfo().Config; c.MaxBytes != opCfg.MaxBytes || c.MaxAge != opCfg.MaxAge {
		t.Fatalf("the bucket after the cell's start: max bytes %d, max age %v; want the operator's %d, %v", c.MaxBytes, c.MaxAge, opCfg.MaxBytes, opCfg.MaxAge)
	}
}

// TestNamesMatch holds the names the permissions are written against
// equal to the ones the code uses.
func TestNamesMatch(t *testing.T) {
	for got, want := range map[string]string{
		natsauth.RefdataStream:  refdata.Stream,
		natsauth.RefdataSubject: refdata.Subject,
		natsauth.StatusPrefix:   refdata.StatusSubjectPrefix,
	} {
		if got != want {
			t.Errorf("natsauth has %q, the code %q", got, want)
		}
	}
}

func TestInboxPrefix(t *testing.T) {
	for id, want := range map[string]string{
		hop.GTR:            "_INBOX.gtr",
		hop.Cell("cell-a"): "_INBOX.cell.cell-a",
		hop.Replicator:     "_INBOX.replicator",
	} {
		if got := natsauth.InboxPrefix(id); got != want {
			t.Errorf("InboxPrefix(%s) = %s; want %s", id, got, want)
		}
	}
}
