package e2e

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/cellpay/cellpay/internal/natsauth"
	"github.com/cellpay/cellpay/internal/natsconn"
	"github.com/cellpay/cellpay/internal/refdata"
)

// TestNATSIsLockedDown: the platform's NATS, as make run starts it, takes
// no anonymous or plaintext client, and a client holding a cell's
// certificate can neither publish reference data nor rewrite the routing
// table: it gets a permissions violation and nothing changes. The
// platform's own components work through it (every other test).
func TestNATSIsLockedDown(t *testing.T) {
	if env.p.NATSURL() == "" {
		t.Fatal("the platform runs without NATS (nats-server missing?): the lockdown cannot be checked")
	}
	url := env.p.NATSURL()
	if nc, err := nats.Connect(strings.Replace(url, "tls://", "nats://", 1), nats.Timeout(3*time.Second)); err == nil {
		nc.Close()
		t.Fatal("a plaintext client without a certificate connected")
	}
	if nc, err := nats.Connect(url, nats.RootCAs(env.p.CAFile()), nats.Timeout(3*time.Second)); err == nil {
		nc.Close()
		t.Fatal("a TLS client without a certificate connected")
	}

	adminOpts, err := env.p.NATSOptions()
	if err != nil {
		t.Fatal(err)
	}
	admin, err := nats.Connect(url, adminOpts...)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	ajs, _ := jetstream.New(admin)
	ctx := ctxFor(t, 30*time.Second)
	stream, err := ajs.Stream(ctx, refdata.Stream)
	if err != nil {
		t.Fatal(err)
	}
	before, err := stream.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	gtrKV, err := ajs.KeyValue(ctx, natsauth.GTRBucket)
	if err != nil {
		t.Fatal(err)
	}
	routingBefore, err := gtrKV.Get(ctx, "routing")
	if err != nil {
		t.Fatal(err)
	}

	cell := env.cells[0].ID
	opts, err := natsconn.TLSOptions(env.p.TLSFiles(cell))
	if err != nil {
		t.Fatal(err)
	}
	violations := make(chan error, 16)
	nc, err := nats.Connect(url, append(opts, nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		select {
		case violations <- err:
		default:
		}
	}))...)
	if err != nil {
		t.Fatalf("%s's certificate: %v", cell, err)
	}
	defer nc.Close()
	if err := nc.Publish(refdata.Subject, []byte(`{"version":999}`)); err != nil {
		t.Fatal(err)
	}
	expectViolation := func(subject string) {
		t.Helper()
		timeout := time.After(5 * time.Second)
		for {
			select {
			case err := <-violations:
				if errors.Is(err, nats.ErrPermissionViolation) && strings.Contains(err.Error(), subject) {
					return
				}
				t.Logf("%s: asynchronous error %v (waiting for the violation on %s)", cell, err, subject)
			case <-timeout:
				t.Fatalf("no permissions violation on %q within 5s for %s", subject, cell)
			}
		}
	}
	expectViolation(refdata.Subject)
	js, _ := jetstream.New(nc)
	short := ctxFor(t, 2*time.Second)
	if _, err := js.Publish(short, refdata.Subject, []byte(`{"version":999}`)); err == nil {
		t.Fatalf("%s published reference data through JetStream", cell)
	}
	kv, err := js.KeyValue(ctx, natsauth.GTRBucket)
	if err != nil {
		t.Fatalf("%s cannot read the GTR's bucket (it follows partners' callbacks): %v", cell, err)
	}
	// The routing entry, through the KV API (the server drops the
	// JetStream publish: the call times out) and as a core publish to its
	// subject: each is a permissions violation naming that subject.
	routingSubject := "$KV." + natsauth.GTRBucket + ".routing"
	if _, err := kv.Put(ctxFor(t, 2*time.Second), "routing", []byte(`{"cells":[]}`)); err == nil {
		t.Fatalf("%s rewrote the routing table", cell)
	}
	expectViolation(routingSubject)
	if err := nc.Publish(routingSubject, []byte(`{"cells":[]}`)); err != nil {
		t.Fatal(err)
	}
	expectViolation(routingSubject)

	after, err := stream.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if after.State.LastSeq != before.State.LastSeq {
		t.Fatalf("reference data stream moved from seq %d to %d", before.State.LastSeq, after.State.LastSeq)
	}
	routingAfter, err := gtrKV.Get(ctx, "routing")
	if err != nil || routingAfter.Revision() != routingBefore.Revision() || !bytes.Equal(routingAfter.Value(), routingBefore.Value()) {
		t.Fatalf("routing entry: revision %d before, %v / %v after (or its value changed)", routingBefore.Revision(), routingAfter, err)
	}
}
