package check

import (
	"strings"
	"testing"

	cmv1 "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmmetav1 "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	cnpgv1 "github.com/cloudnative-pg/cloudnative-pg/api/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// withObject returns a copy of objs whose object kind ns/name has been
// through change, on a deep copy so that objs is left alone.
func withObject[T runtime.Object](t *testing.T, objs []Object, kind, ns, name string, change func(T)) []Object {
	t.Helper()
	out := append([]Object(nil), objs...)
	for i, o := range out {
		if o.GVK.Kind == kind && o.Namespace == ns && o.Name == name {
			c := o.Typed.DeepCopyObject().(T)
			change(c)
			out[i].Typed = c
			return out
		}
	}
	t.Fatalf("no %s %s/%s rendered", kind, ns, name)
	return nil
}

// containerOf is the first container of a Deployment.
func containerOf(d *appsv1.Deployment) *corev1.Container { return &d.Spec.Template.Spec.Containers[0] }

func dropEnv(c *corev1.Container, name string) {
	var env []corev1.EnvVar
	for _, e := range c.Env {
		if e.Name != name {
			env = append(env, e)
		}
	}
	c.Env = env
}

// TestHopTLSChecksCatch breaks the internal hops' TLS wiring one way at a
// time and expects each to be reported.
func TestHopTLSChecksCatch(t *testing.T) {
	base := renderAll(t, deployDir)
	cell := func(change func(d *appsv1.Deployment)) []Object {
		return withObject(t, base, "Deployment", "cell-b", "cell", change)
	}
	cert := func(kind, ns, name string, change func(c *cmv1.Certificate)) []Object {
		return withObject(t, base, kind, ns, name, change)
	}
	cases := []brokenCase{
		{"cell without TLS", cell(func(d *appsv1.Deployment) { dropEnv(containerOf(d), "CELL_TLS_CA") }),
			[]string{"Deployment cell-b/cell container cell: no CELL_TLS_CA: the cell's hop is not mutual TLS"}},
		{"cell certificate by subPath", cell(func(d *appsv1.Deployment) {
			c := containerOf(d)
			for i, m := range c.VolumeMounts {
				if m.Name == "tls" {
					c.VolumeMounts[i].MountPath, c.VolumeMounts[i].SubPath = "/etc/cellpay/tls/tls.crt", "tls.crt"
				}
			}
		}), []string{"container cell: CELL_TLS_CERT is mounted with subPath"}},
		{"cell CA from another Secret", cell(func(d *appsv1.Deployment) {
			setEnv(containerOf(d), corev1.EnvVar{Name: "CELL_TLS_CA", Value: "/etc/cellpay/postgres-ca/ca.crt"})
		}), []string{"CELL_TLS_CERT, CELL_TLS_KEY and CELL_TLS_CA are not of one Secret"}},
		{"cell certificate of another cell", cert("Certificate", "cell-b", "cell", func(c *cmv1.Certificate) {
			c.Spec.URIs = []string{"spiffe://cellpay.internal/cell/cell-a"}
			c.Spec.DNSNames = c.Spec.DNSNames[:1]
			c.Spec.Usages = []cmv1.KeyUsage{cmv1.UsageServerAuth}
		}), []string{
			"Certificate cell-b/cell: uris [spiffe://cellpay.internal/cell/cell-a] lack spiffe://cellpay.internal/cell/cell-b",
			"Certificate cell-b/cell: dnsNames lack cell.cell-b.svc.cluster.local",
			"Certificate cell-b/cell: usages lack client auth",
		}},
		{"cell certificate from its own namespace's Issuer", cert("Certificate", "cell-c", "cell", func(c *cmv1.Certificate) {
			c.Spec.IssuerRef = issuerRef(cmv1.IssuerKind, "cell-ca")
		}), []string{"Certificate cell-c/cell: issued by Issuer cell-ca of namespace cell-c", "the hops' CAs differ"}},
		{"cell probed on its TLS port", cell(func(d *appsv1.Deployment) { containerOf(d).ReadinessProbe.GRPC.Port = 7081 }),
			[]string{"container cell: readiness probe asks port 7081, the mutual-TLS port"}},
		{"cell health port off", cell(func(d *appsv1.Deployment) { dropEnv(containerOf(d), "CELL_HEALTH_LISTEN") }),
			[]string{"container cell: CELL_HEALTH_LISTEN: not set"}},
		{"issuer certificate missing", without(base, "Certificate", "cellpay-issuer", "issuersim"),
			[]string{"TLS Secret issuersim-tls is issued by no rendered Certificate in cellpay-issuer"}},
		{"issuer probed on its TLS port", withObject(t, base, "Deployment", "cellpay-issuer", "issuersim", func(d *appsv1.Deployment) {
			containerOf(d).LivenessProbe.GRPC.Port = 7090
		}), []string{"container issuersim: liveness probe asks port 7090, the mutual-TLS port"}},
		{"GTR's cell identity is the partners' certificate", withObject(t, base, "Deployment", GTRNamespace, "gtr-backup", func(d *appsv1.Deployment) {
			c := containerOf(d)
			setEnv(c, corev1.EnvVar{Name: "GTR_CELL_TLS_CERT", Value: "/etc/cellpay/tls/tls.crt"})
			setEnv(c, corev1.EnvVar{Name: "GTR_CELL_TLS_KEY", Value: "/etc/cellpay/tls/tls.key"})
			setEnv(c, corev1.EnvVar{Name: "GTR_CELL_CA", Value: "/etc/cellpay/tls/ca.crt"})
		}), []string{
			"Certificate cellpay-gtr/gtr: uris [] lack spiffe://cellpay.internal/gtr",
			"Certificate cellpay-gtr/gtr: usages lack client auth",
			"Certificate cellpay-gtr/gtr: issued by Issuer gtr-ca of namespace cellpay-gtr",
		}},
		{"GTR's admin listener on the partners' certificate", withObject(t, base, "Deployment", GTRNamespace, "gtr-backup", func(d *appsv1.Deployment) {
			c := containerOf(d)
			setEnv(c, corev1.EnvVar{Name: "GTR_ADMIN_TLS_CERT", Value: "/etc/cellpay/tls/tls.crt"})
			setEnv(c, corev1.EnvVar{Name: "GTR_ADMIN_TLS_KEY", Value: "/etc/cellpay/tls/tls.key"})
		}), []string{
			"Certificate cellpay-gtr/gtr: uris [] lack spiffe://cellpay.internal/gtr, the GTR's admin listener's identity",
			"Certificate cellpay-gtr/gtr: dnsNames lack gtr-admin.cellpay-gtr.svc",
			"Certificate cellpay-gtr/gtr: issued by Issuer gtr-ca of namespace cellpay-gtr",
		}},
		{"GTR's admin listener without a certificate of its own", withObject(t, base, "Deployment", GTRNamespace, "gtr", func(d *appsv1.Deployment) {
			dropEnv(containerOf(d), "GTR_ADMIN_TLS_CERT")
		}), []string{"Deployment cellpay-gtr/gtr container gtr: no GTR_ADMIN_TLS_CERT: the admin listener serves the partners' certificate"}},
		{"GTR's admin certificate from another CA", cert("Certificate", GTRNamespace, "gtr-admin", func(c *cmv1.Certificate) {
			c.Spec.IssuerRef = issuerRef(cmv1.IssuerKind, "gtr-ca")
		}), []string{"Certificate cellpay-gtr/gtr-admin: issued by Issuer gtr-ca of namespace cellpay-gtr", "the hops' CAs differ"}},
		{"GTR's admin certificate for clients only", cert("Certificate", GTRNamespace, "gtr-admin", func(c *cmv1.Certificate) {
			c.Spec.Usages = []cmv1.KeyUsage{cmv1.UsageClientAuth}
			c.Spec.DNSNames = c.Spec.DNSNames[:1]
		}), []string{"Certificate cellpay-gtr/gtr-admin: usages lack server auth", "Certificate cellpay-gtr/gtr-admin: dnsNames lack gtr-admin.cellpay-gtr.svc.cluster.local"}},
		{"cell in plaintext", cell(func(d *appsv1.Deployment) {
			containerOf(d).Env = append(containerOf(d).Env, corev1.EnvVar{Name: "CELL_INSECURE_PLAINTEXT", Value: "1"})
		}), []string{"Deployment cell-b/cell container cell: CELL_INSECURE_PLAINTEXT: plaintext hops"}},
		{"GTR in plaintext", withObject(t, base, "Deployment", GTRNamespace, "gtr", func(d *appsv1.Deployment) {
			containerOf(d).Args = append(containerOf(d).Args, "-insecure-plaintext")
		}), []string{"Deployment cellpay-gtr/gtr container gtr: -insecure-plaintext: plaintext hops"}},
		{"GTR with the legacy admin token", withObject(t, base, "Deployment", GTRNamespace, "gtr", func(d *appsv1.Deployment) {
			setEnv(containerOf(d), corev1.EnvVar{Name: "GTR_ADMIN_TOKEN_FILE", Value: "/etc/cellpay/operators/operators.yaml"})
		}), []string{"Deployment cellpay-gtr/gtr container gtr: GTR_ADMIN_TOKEN_FILE: the legacy shared admin token"}},
		{"NATS certificate from another CA", cert("Certificate", "cellpay-nats", "nats", func(c *cmv1.Certificate) {
			c.Spec.IssuerRef = issuerRef(cmv1.ClusterIssuerKind, "other-ca")
		}), []string{"Certificate cellpay-nats/nats: issued by ClusterIssuer other-ca"}},
		{"internal CA not issued", without(base, "Certificate", "cert-manager", "cellpay-internal-ca"),
			[]string{"ClusterIssuer/cellpay-internal-ca: CA Secret cellpay-internal-ca is neither rendered nor issued by a rendered CA Certificate in cert-manager"}},
	}
	checkBroken(t, cases)
}

func issuerRef(kind, name string) cmmetav1.IssuerReference {
	return cmmetav1.IssuerReference{Group: "cert-manager.io", Kind: kind, Name: name}
}

// TestDatabaseChecksCatch breaks a cell's Postgres or how the cell reaches
// it, one way at a time, and expects each to be reported.
func TestDatabaseChecksCatch(t *testing.T) {
	base := renderAll(t, deployDir)
	cluster := func(change func(c *cnpgv1.Cluster)) []Object {
		return withObject(t, base, "Cluster", "cell-a", "postgres", change)
	}
	cell := func(change func(c *corev1.Container)) []Object {
		return withObject(t, base, "Deployment", "cell-a", "cell", func(d *appsv1.Deployment) { change(containerOf(d)) })
	}
	setURL := func(env, from, to string) []Object {
		return cell(func(c *corev1.Container) {
			for i, e := range c.Env {
				if e.Name == env {
					if !strings.Contains(e.Value, from) {
						t.Fatalf("%s %q has no %q", env, e.Value, from)
					}
					c.Env[i].Value = strings.Replace(e.Value, from, to, 1)
				}
			}
		})
	}
	cases := []brokenCase{
		{"one instance, no synchronous standby", cluster(func(c *cnpgv1.Cluster) {
			c.Spec.Instances, c.Spec.PostgresConfiguration.Synchronous = 1, nil
		}), []string{"Cluster cell-a/postgres: 1 instances, want 2 or more", "Cluster cell-a/postgres: no synchronous replication"}},
		{"no Cluster", without(base, "Cluster", "cell-b", "postgres"),
			[]string{"cell-b: 0 CloudNativePG Clusters, want one", "cell-b: no Postgres Cluster"}},
		{"app role may create roles", cluster(func(c *cnpgv1.Cluster) { c.Spec.Managed.Roles[1].CreateRole = true }),
			[]string{"role cellpay_app may do more than read and write"}},
		{"app role outside pg_monitor", cluster(func(c *cnpgv1.Cluster) { c.Spec.Managed.Roles[1].InRoles = nil }),
			[]string{"role cellpay_app is not in pg_monitor"}},
		{"app role without grants", cluster(func(c *cnpgv1.Cluster) { c.Spec.Bootstrap.InitDB.PostInitApplicationSQL = nil }),
			[]string{"postInitApplicationSQL grants cellpay_app no default privileges"}},
		{"server takes plaintext (no pg_hba)", cluster(func(c *cnpgv1.Cluster) { c.Spec.PostgresConfiguration.PgHBA = nil }),
			[]string{`Cluster cell-a/postgres: pg_hba has no "hostnossl all all all reject"`,
				"Cluster cell-a/postgres: pg_hba: role cellpay_app reaches database cellpay over TLS by no hostssl scram-sha-256 rule",
				"Cluster cell-a/postgres: pg_hba: role cellpay_owner reaches database cellpay over TLS by no hostssl scram-sha-256 rule"}},
		{"server takes plaintext before the reject", cluster(func(c *cnpgv1.Cluster) {
			c.Spec.PostgresConfiguration.PgHBA = append([]string{"host cellpay cellpay_app 10.0.0.0/8 scram-sha-256"}, c.Spec.PostgresConfiguration.PgHBA...)
		}), []string{`Cluster cell-a/postgres: pg_hba "host cellpay cellpay_app 10.0.0.0/8 scram-sha-256" takes connections without TLS`}},
		{"md5 over TLS", cluster(func(c *cnpgv1.Cluster) {
			c.Spec.PostgresConfiguration.PgHBA = []string{"hostnossl all all all reject", "hostssl all all all md5"}
		}), []string{`Cluster cell-a/postgres: pg_hba "hostssl all all all md5" authenticates by md5`,
			"Cluster cell-a/postgres: pg_hba: role cellpay_app reaches database cellpay over TLS by no hostssl scram-sha-256 rule"}},
		{"trust for the owner ahead of scram", cluster(func(c *cnpgv1.Cluster) {
			c.Spec.PostgresConfiguration.PgHBA = append([]string{"hostssl all cellpay_owner all trust"}, c.Spec.PostgresConfiguration.PgHBA...)
		}), []string{`pg_hba "hostssl all cellpay_owner all trust" authenticates by trust`,
			"pg_hba: role cellpay_owner reaches database cellpay over TLS by no hostssl scram-sha-256 rule"}},
		{"plaintext", setURL(appURLEnv, "sslmode=verify-full", "sslmode=disable"),
			[]string{"cell-a: CELL_DATABASE_URL: sslmode=disable, want verify-full"}},
		{"a replica, not the primary", setURL(appURLEnv, "postgres-rw:", "postgres-ro:"),
			[]string{"cell-a: CELL_DATABASE_URL: host postgres-ro, want Service postgres-rw"}},
		{"the app as the owner", setURL(appURLEnv, "cellpay_app:$(PG_APP_PASSWORD)", "cellpay_owner:$(PG_OWNER_PASSWORD)"),
			[]string{"cell-a: CELL_DATABASE_URL logs in as the owner cellpay_owner"}},
		{"migrations as the app", setURL(migrateURLEnv, "cellpay_owner:$(PG_OWNER_PASSWORD)", "cellpay_app:$(PG_APP_PASSWORD)"),
			[]string{"cell-a: CELL_MIGRATE_DATABASE_URL logs in as cellpay_app, want the database's owner cellpay_owner"}},
		{"a password in the clear", setURL(appURLEnv, "$(PG_APP_PASSWORD)", "hunter2"),
			[]string{"cell-a: CELL_DATABASE_URL: the password is not one $(VAR) reference"}},
		{"the owner's password for the app", setURL(appURLEnv, "$(PG_APP_PASSWORD)", "$(PG_OWNER_PASSWORD)"),
			[]string{"cell-a: CELL_DATABASE_URL: the password of cellpay_app is from Secret cellpay-owner-"}},
		{"password defined after its use", cell(func(c *corev1.Container) {
			var pw corev1.EnvVar
			var env []corev1.EnvVar
			for _, e := range c.Env {
				if e.Name == "PG_APP_PASSWORD" {
					pw = e
				} else {
					env = append(env, e)
				}
			}
			c.Env = append(env, pw)
		}), []string{"cell-a: CELL_DATABASE_URL: $(PG_APP_PASSWORD) is not defined before it"}},
		{"the CA's key mounted", withObject(t, base, "Deployment", "cell-a", "cell", func(d *appsv1.Deployment) {
			for i, v := range d.Spec.Template.Spec.Volumes {
				if v.Name == "postgres-ca" {
					d.Spec.Template.Spec.Volumes[i].Secret.Items = nil
				}
			}
		}), []string{"the volume of Secret postgres-ca holds more than ca.crt"}},
		{"CA from the wrong Secret", setURL(appURLEnv, "/etc/cellpay/postgres-ca/ca.crt", "/etc/cellpay/tls/ca.crt"),
			[]string{"cell-a: CELL_DATABASE_URL: sslrootcert is key ca.crt of Secret cell-tls, want ca.crt of postgres-ca"}},
		{"a password that breaks the URL", withSecretData(t, base, "cell-a", "cellpay-app-", "password", "p@ss/word"),
			[]string{"cell-a: CELL_DATABASE_URL: Secret cellpay-app-", "password is not URL-safe"}},
	}
	checkBroken(t, cases)
}

// withSecretData sets one key of the Secret in ns whose name starts with
// prefix (a generated name).
func withSecretData(t *testing.T, objs []Object, ns, prefix, key, val string) []Object {
	t.Helper()
	out := append([]Object(nil), objs...)
	for i, o := range out {
		if s, ok := o.Typed.(*corev1.Secret); ok && o.Namespace == ns && strings.HasPrefix(o.Name, prefix) {
			s = s.DeepCopy()
			s.Data[key] = []byte(val)
			out[i].Typed = s
			return out
		}
	}
	t.Fatalf("no Secret %s/%s*", ns, prefix)
	return nil
}
