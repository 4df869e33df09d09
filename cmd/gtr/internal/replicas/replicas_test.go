package replicas_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/cellpay/cellpay/cmd/gtr/internal/replicas"
	"github.com/cellpay/cellpay/internal/dev/pki"
	"github.com/cellpay/cellpay/internal/dev/testutil"
	"github.com/cellpay/cellpay/internal/dev/testutil/natstest"
	"github.com/cellpay/cellpay/internal/hop"
	"github.com/cellpay/cellpay/internal/natsauth"
	"github.com/cellpay/cellpay/internal/tlsconf"
)

// secureNATS runs a NATS server with the platform's TLS and permissions
// and returns its URL and the GTR's files.
func secureNATS(t *testing.T) (string, tlsconf.Files) {
	t.Helper()
	dir := t.TempDir()
	ca, err := pki.EnsureCA(filepath.Join(dir, "pki"))
	if err != nil {
		t.Fatal(err)
	}
	if err := ca.Issue("nats", []string{"127.0.0.1", hop.NATS}, pki.Server); err != nil {
		t.Fatal(err)
	}
	if err := ca.Issue("gtr", []string{hop.GTR}, pki.Client); err != nil {
		t.Fatal(err)
	}
	port, err := testutil.FreePortRun(1)
	if err != nil {
		t.Fatal(err)
	}
	conf := natsauth.Server{Host: "127.0.0.1", Port: port, StoreDir: filepath.Join(dir, "js"),
		Cert: pki.CertFile(ca.Dir, "nats"), Key: pki.KeyFile(ca.Dir, "nats"), CA: ca.CertFile()}
	file := filepath.Join(dir, "nats.conf")
	if err := os.WriteFile(file, []byte(conf.Config()), 0o600); err != nil {
		t.Fatal(err)
	}
	ns := natstest.StartFile(t, file)
	return ns.URL(), tlsconf.Files{Cert: pki.CertFile(ca.Dir, "gtr"), Key: pki.KeyFile(ca.Dir, "gtr"), CA: ca.CertFile()}
}

func start(t *testing.T, id, url string, files tlsconf.Files) *replicas.Replicas {
	t.Helper()
	r, err := replicas.Start(replicas.Config{ReplicaID: id, NATSURL: url, NATSTLS: files, Window: time.Second,
		Handlers: map[string]replicas.Handler{"echo": func(_ context.Context, q []byte) (json.RawMessage, error) {
			return json.Marshal(id + ":" + string(q))
		}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	return r
}

// TestEveryReplicaAnswers: over NATS with the GTR's identity and
// permissions, a question reaches every replica and each answers once; a
// replica without NATS answers alone; an unknown question is an error.
func TestEveryReplicaAnswers(t *testing.T) {
	url, files := secureNATS(t)
	a := start(t, "gtr-a", url, files)
	start(t, "gtr-b", url, files)
	var got []replicas.Answer
	testutil.Eventually(t, 10*time.Second, "both replicas answering", func() bool {
		var err error
		got, err = a.Ask(t.Context(), "echo", []byte("q"))
		return err == nil && len(got) == 2
	})
	// Once both are known, a question ends when both have answered.
	if again, err := a.Ask(t.Context(), "echo", []byte("q")); err != nil || len(again) != 2 {
		t.Fatalf("asked again: %+v, %v", again, err)
	}
	for i, want := range []string{"gtr-a", "gtr-b"} {
		var body string
		if err := json.Unmarshal(got[i].Body, &body); err != nil || got[i].Replica != want || body != want+":q" {
			t.Fatalf("answer %d: %+v (%v), want %s's", i, got[i], err, want)
		}
	}
	alone := start(t, "gtr-c", "", tlsconf.Files{})
	if got, err := alone.Ask(t.Context(), "echo", []byte("q")); err != nil || len(got) != 1 || got[0].Replica != "gtr-c" {
		t.Fatalf("alone: %+v, %v", got, err)
	}
	if _, err := a.Ask(t.Context(), "nope", nil); err == nil {
		t.Fatal("an unknown question asked")
	}
}

// TestAnswersNameTheirSite: each answer names its replica's site, over
// NATS and alone; a replica without one names none.
func TestAnswersNameTheirSite(t *testing.T) {
	url, files := secureNATS(t)
	echo := map[string]replicas.Handler{"echo": func(context.Context, []byte) (json.RawMessage, error) { return json.RawMessage(`1`), nil }}
	var asker *replicas.Replicas
	for _, c := range []replicas.Config{{ReplicaID: "gtr-a", Site: "site-a"}, {ReplicaID: "gtr-b", Site: "site-b"}, {ReplicaID: "gtr-c"}} {
		c.NATSURL, c.NATSTLS, c.Window, c.Handlers = url, files, time.Second, echo
		r, err := replicas.Start(c)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(r.Close)
		if asker == nil {
			asker = r
		}
	}
	var got []replicas.Answer
	testutil.Eventually(t, 10*time.Second, "three replicas answering", func() bool {
		var err error
		got, err = asker.Ask(t.Context(), "echo", nil)
		return err == nil && len(got) == 3
	})
	for i, want := range []string{"site-a", "site-b", ""} {
		if got[i].Site != want {
			t.Errorf("%s answers from site %q, want %q", got[i].Replica, got[i].Site, want)
		}
	}
	alone, err := replicas.Start(replicas.Config{ReplicaID: "gtr-d", Site: "site-d", Handlers: echo})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(alone.Close)
	if got, err := alone.Ask(t.Context(), "echo", nil); err != nil || len(got) != 1 || got[0].Site != "site-d" {
		t.Fatalf("alone: %+v, %v", got, err)
	}
}
