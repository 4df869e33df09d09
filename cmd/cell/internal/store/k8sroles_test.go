package store

import (
	"net/url"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"gopkg.in/yaml.v3"

	"github.com/cellpay/cellpay/internal/dev/pgtest"
	"github.com/cellpay/cellpay/internal/pnr/cellside"
)

// k8sCluster is the part of deploy/k8s/base/cell/postgres.yaml (a
// CloudNativePG Cluster) that sets up the cell's roles.
type k8sCluster struct {
	Spec struct {
		Bootstrap struct {
			InitDB struct {
				Owner                  string   `yaml:"owner"`
				PostInitApplicationSQL []string `yaml:"postInitApplicationSQL"`
			} `yaml:"initdb"`
		} `yaml:"bootstrap"`
	} `yaml:"spec"`
}

// TestKubernetesRoles sets a database up as the Kubernetes manifests have
// CloudNativePG do it (deploy/k8s/base/cell/postgres.yaml: the owner owns
// the database, postInitApplicationSQL runs once as the superuser, the
// managed roles then give cellpay_app its LOGIN), migrates it as the owner,
// and checks that the app role can do the cell's work and no DDL.
func TestKubernetesRoles(t *testing.T) {
	ctx := ctxT(t)
	raw, err := os.ReadFile(filepath.Join("..", "..", "..", "..", "deploy", "k8s", "base", "cell", "postgres.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var cl k8sCluster
	if err := yaml.Unmarshal(raw, &cl); err != nil {
		t.Fatal(err)
	}
	initdb := cl.Spec.Bootstrap.InitDB
	if initdb.Owner == "" || len(initdb.PostInitApplicationSQL) == 0 {
		t.Fatalf("postgres.yaml: no initdb owner or postInitApplicationSQL: %+v", initdb)
	}
	const app = "cellpay_app"

	super := pgtest.NewDatabase(t)
	u, _ := url.Parse(super)
	db := u.Path[1:]
	sc, err := pgx.Connect(ctx, super)
	if err != nil {
		t.Fatal(err)
	}
	defer sc.Close(ctx)
	// What initdb does (the cluster is the test binary's own, so the roles
	// may exist from an earlier run of this test in it).
	for _, q := range []string{
		"DO $$BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '" + initdb.Owner + "') THEN CREATE ROLE " + initdb.Owner + " LOGIN; END IF; END$$",
		"DROP ROLE IF EXISTS " + app,
		"ALTER DATABASE " + db + " OWNER TO " + initdb.Owner,
	} {
		if _, err := sc.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	for _, q := range initdb.PostInitApplicationSQL {
		if _, err := sc.Exec(ctx, q); err != nil {
			t.Fatalf("postInitApplicationSQL %q: %v", q, err)
		}
	}
	// What the managed role cellpay_app (login: true) does.
	if _, err := sc.Exec(ctx, "ALTER ROLE "+app+" LOGIN"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx := ctxT(t)
		if c, err := pgx.Connect(ctx, super); err == nil {
			_, _ = c.Exec(ctx, "DROP OWNED BY "+app)
			c.Close(ctx)
		}
	})

	as := func(role string) string {
		v := *u
		v.User = url.User(role)
		return v.String()
	}
	owner, err := Open(ctx, as(initdb.Owner), 2) // migrates
	if err != nil {
		t.Fatalf("migrate as %s: %v", initdb.Owner, err)
	}
	owner.Close()
	s, err := Open(ctx, as(app), 2)
	if err != nil {
		t.Fatalf("open as %s: %v", app, err)
	}
	defer s.Close()
	r := record("t-k8s")
	if ins, _, err := s.Insert(ctx, r); err != nil || !ins {
		t.Fatalf("Insert as %s = %v, %v", app, ins, err)
	}
	r.State, r.UpdatedAt = cellside.StateSending, t0.Add(time.Second)
	if err := s.Persist(ctx, r, cellside.StateReceived); err != nil {
		t.Fatalf("Persist as %s: %v", app, err)
	}
	// A final outcome writes its outbox row (a bigserial: the sequence).
	r.State, r.AuthCode, r.UpdatedAt = cellside.StateApproved, "A1B2C3", t0.Add(2*time.Second)
	if err := s.Persist(ctx, r, cellside.StateSending); err != nil {
		t.Fatalf("final Persist as %s: %v", app, err)
	}
	if _, err := s.Policy(ctx); err != nil {
		t.Fatalf("Policy as %s: %v", app, err)
	}
	if cbs, err := s.ClaimCallbacks(ctx, "k8s", t0.Add(time.Hour), time.Minute, 10); err != nil || len(cbs) != 1 {
		t.Fatalf("ClaimCallbacks as %s = %d callbacks, %v; want the outcome's", app, len(cbs), err)
	}
	c, err := pgx.Connect(ctx, as(app))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	for _, q := range []string{"CREATE TABLE k8s_probe (i int)", "DROP TABLE transactions", "ALTER TABLE outbox ADD COLUMN x int"} {
		if _, err := c.Exec(ctx, q); err == nil {
			t.Errorf("%s as %s: allowed, want refused", q, app)
		}
	}
}
