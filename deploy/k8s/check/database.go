package check

import (
	"fmt"
	"maps"
	"net/url"
	"regexp"
	"slices"
	"strings"

	cnpgv1 "github.com/cloudnative-pg/cloudnative-pg/api/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
)

// The cell's database settings, by the names the cell reads.
const (
	appURLEnv     = "CELL_DATABASE_URL"         // reads and writes: the app role
	migrateURLEnv = "CELL_MIGRATE_DATABASE_URL" // migrations: the database's owner
)

// CheckDatabase checks a cell's Postgres, a CloudNativePG Cluster, and how
// the cell reaches it:
//
//   - exactly one Cluster in the namespace, of 2 or more instances, with
//     synchronous replication (spec.postgresql.synchronous, or
//     minSyncReplicas) and storage;
//   - its pg_hba rejects every TCP connection without TLS before anything
//     could take it (CNPG's own default rule, host all all all
//     scram-sha-256, would take a password in the clear), and over TLS
//     takes scram-sha-256 for the database and its roles, never a weaker
//     method (checkHBA);
//   - the database's owner and an app role are managed roles with LOGIN
//     and a password Secret; the app role may not create, replicate or
//     bypass anything, and is granted its rows by the owner's default
//     privileges (postInitApplicationSQL);
//   - CELL_DATABASE_URL logs in as the app role and
//     CELL_MIGRATE_DATABASE_URL as the owner, both to the Cluster's -rw
//     Service with sslmode=verify-full and sslrootcert the ca.crt of its
//     CA Secret, mounted whole (never the CA's key);
//   - each URL's password is $(VAR) of an env var defined before it, from
//     key password of that role's basic-auth Secret, which is rendered,
//     names the role, and holds a URL-safe password;
//   - it is backed up: WAL archived to an object store and base backups
//     scheduled (CheckBackup, backup.go).
func CheckDatabase(w *World, ns string) []string {
	clusters := w.Find("Cluster", ns)
	if len(clusters) != 1 {
		return []string{fmt.Sprintf("%s: %d CloudNativePG Clusters, want one: the cell's own Postgres", ns, len(clusters))}
	}
	co := clusters[0]
	cl := co.Typed.(*cnpgv1.Cluster)
	var v []string
	if cl.Spec.Instances < 2 {
		v = append(v, fmt.Sprintf("%s: %d instances, want 2 or more (a synchronous standby)", co, cl.Spec.Instances))
	}
	sync := cl.Spec.PostgresConfiguration.Synchronous
	if (sync == nil || sync.Number < 1) && cl.Spec.MinSyncReplicas < 1 {
		v = append(v, fmt.Sprintf("%s: no synchronous replication (spec.postgresql.synchronous.number or minSyncReplicas)", co))
	}
	if cl.Spec.StorageConfiguration.Size == "" && cl.Spec.StorageConfiguration.PersistentVolumeClaimTemplate == nil {
		v = append(v, fmt.Sprintf("%s: no storage size", co))
	}
	v = append(v, CheckBackup(w, ns, co)...)
	initdb := (*cnpgv1.BootstrapInitDB)(nil)
	if cl.Spec.Bootstrap != nil {
		initdb = cl.Spec.Bootstrap.InitDB
	}
	if initdb == nil || initdb.Owner == "" || initdb.Database == "" {
		return append(v, fmt.Sprintf("%s: no bootstrap.initdb with a database and its owner", co))
	}
	owner := initdb.Owner
	roles := map[string]cnpgv1.RoleConfiguration{}
	if cl.Spec.Managed != nil {
		for _, r := range cl.Spec.Managed.Roles {
			roles[r.Name] = r
		}
	}
	v = append(v, checkHBA(co, cl.Spec.PostgresConfiguration.PgHBA, initdb.Database, slices.Sorted(maps.Keys(roles)))...)
	if _, ok := roles[owner]; !ok {
		v = append(v, fmt.Sprintf("%s: the owner %s is not a managed role", co, owner))
	}

	dep, ok := w.get("Deployment", ns, "cell")
	if !ok {
		return v // reported by CheckCells
	}
	spec := dep.Typed.(*appsv1.Deployment).Spec.Template.Spec
	c, ok := container(spec, "cell")
	if !ok {
		return append(v, ns+": no container cell")
	}
	caSecret := cl.Name + "-ca"
	if cl.Spec.Certificates != nil && cl.Spec.Certificates.ServerCASecret != "" {
		caSecret = cl.Spec.Certificates.ServerCASecret
	}
	users := map[string]string{}
	for _, env := range []string{appURLEnv, migrateURLEnv} {
		user, msgs := databaseURL(w, ns, spec, c, cl, caSecret, env, roles)
		users[env] = user
		v = append(v, msgs...)
	}
	if users[migrateURLEnv] != "" && users[migrateURLEnv] != owner {
		v = append(v, fmt.Sprintf("%s: %s logs in as %s, want the database's owner %s (migrations)", ns, migrateURLEnv, users[migrateURLEnv], owner))
	}
	app := users[appURLEnv]
	switch {
	case app == "":
	case app == owner:
		v = append(v, fmt.Sprintf("%s: %s logs in as the owner %s, want a role that only reads and writes", ns, appURLEnv, owner))
	default:
		r, ok := roles[app]
		if !ok {
			v = append(v, fmt.Sprintf("%s: %s's role %s is not a managed role of %s", ns, appURLEnv, app, co))
			break
		}
		if r.Superuser || r.CreateDB || r.CreateRole || r.Replication || r.BypassRLS {
			v = append(v, fmt.Sprintf("%s: role %s may do more than read and write (superuser, createdb, createrole, replication or bypassrls)", co, app))
		}
		if !slices.Contains(r.InRoles, "pg_monitor") {
			v = append(v, fmt.Sprintf("%s: role %s is not in pg_monitor: the cell's standby gauges and their alerts need it", co, app))
		}
		grants := strings.Join(initdb.PostInitApplicationSQL, "\n")
		if !strings.Contains(grants, "ALTER DEFAULT PRIVILEGES FOR ROLE "+owner) || !strings.Contains(grants, "TO "+app) {
			v = append(v, fmt.Sprintf("%s: postInitApplicationSQL grants %s no default privileges on %s's tables", co, app, owner))
		}
	}
	return v
}

// urlSafe is what a password inside a URL may be without escaping.
var urlSafe = regexp.MustCompile(`^[A-Za-z0-9._~-]+$`)

// userinfoRef finds a URL's password when it is one Kubernetes env
// reference, user:$(NAME)@.
var userinfoRef = regexp.MustCompile(`:(\$\(([A-Za-z_][A-Za-z0-9_]*)\))@`)

// databaseURL checks one of the cell's database URLs and returns the role
// it logs in as.
func databaseURL(w *World, ns string, spec corev1.PodSpec, c corev1.Container, cl *cnpgv1.Cluster, caSecret, env string, roles map[string]cnpgv1.RoleConfiguration) (string, []string) {
	at := ns + ": " + env
	idx := slices.IndexFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == env })
	if idx < 0 || c.Env[idx].ValueFrom != nil {
		return "", []string{at + ": not set as a value"}
	}
	raw := c.Env[idx].Value
	// $(VAR) is not URL syntax: parse with a stand-in, then read it back.
	m := userinfoRef.FindStringSubmatch(raw)
	if m == nil {
		return "", []string{at + ": the password is not one $(VAR) reference (user:$(VAR)@host)"}
	}
	u, err := url.Parse(strings.Replace(raw, m[1], "PASSWORD", 1))
	if err != nil {
		return "", []string{at + ": " + err.Error()}
	}
	var v []string
	user := u.User.Username()
	if host := u.Hostname(); !slices.Contains(serviceNames(cl.Name+"-rw", ns), host) {
		v = append(v, fmt.Sprintf("%s: host %s, want Service %s-rw (the primary)", at, host, cl.Name))
	}
	q := u.Query()
	if q.Get("sslmode") != "verify-full" {
		v = append(v, fmt.Sprintf("%s: sslmode=%s, want verify-full", at, q.Get("sslmode")))
	}
	v = append(v, rootCert(spec, c, at, q.Get("sslrootcert"), caSecret)...)
	ref := m[2]
	vi := slices.IndexFunc(c.Env[:idx], func(e corev1.EnvVar) bool { return e.Name == ref })
	if vi < 0 {
		return user, append(v, fmt.Sprintf("%s: $(%s) is not defined before it (kubelet leaves it unexpanded)", at, ref))
	}
	pw := c.Env[vi]
	if pw.ValueFrom == nil || pw.ValueFrom.SecretKeyRef == nil || pw.ValueFrom.SecretKeyRef.Key != "password" {
		return user, append(v, fmt.Sprintf("%s: %s is not key password of a Secret", at, pw.Name))
	}
	secret := pw.ValueFrom.SecretKeyRef.Name
	want := ""
	if r, ok := roles[user]; ok && r.PasswordSecret != nil {
		want = r.PasswordSecret.Name
	}
	if secret != want {
		v = append(v, fmt.Sprintf("%s: the password of %s is from Secret %s, want %q (the role's passwordSecret)", at, user, secret, want))
	}
	so, ok := w.get("Secret", ns, secret)
	if !ok {
		return user, append(v, fmt.Sprintf("%s: Secret %s is not rendered", at, secret))
	}
	s := so.Typed.(*corev1.Secret)
	data := secretData(s)
	if s.Type != corev1.SecretTypeBasicAuth || data["username"] != user {
		v = append(v, fmt.Sprintf("%s: Secret %s is not of type %s with username %s (what CNPG reads)", at, secret, corev1.SecretTypeBasicAuth, user))
	}
	if !urlSafe.MatchString(data["password"]) {
		v = append(v, fmt.Sprintf("%s: Secret %s's password is not URL-safe ([A-Za-z0-9._~-]); the URL would break", at, secret))
	}
	return user, v
}

// rootCert checks a URL's sslrootcert: ca.crt of the Cluster's CA Secret,
// mounted whole, and nothing else of that Secret (it holds the CA's key).
func rootCert(spec corev1.PodSpec, c corev1.Container, at, root, caSecret string) []string {
	if root == "" {
		return []string{at + ": no sslrootcert (the Cluster's CA)"}
	}
	src, ok := resolveFile(spec, c, root)
	if !ok || src.Volume.Secret == nil {
		return []string{fmt.Sprintf("%s: sslrootcert %s is in no Secret volume", at, root)}
	}
	var v []string
	if src.Volume.Secret.SecretName != caSecret || src.Key != "ca.crt" {
		v = append(v, fmt.Sprintf("%s: sslrootcert is key %s of Secret %s, want ca.crt of %s (the Cluster's CA)", at, src.Key, src.Volume.Secret.SecretName, caSecret))
	}
	if src.Mount.SubPath != "" || src.Mount.SubPathExpr != "" {
		v = append(v, at+": sslrootcert is mounted with subPath, which never sees a renewed CA")
	}
	if items := src.Volume.Secret.Items; len(items) == 0 || slices.ContainsFunc(items, func(it corev1.KeyToPath) bool { return it.Key != "ca.crt" }) {
		v = append(v, fmt.Sprintf("%s: the volume of Secret %s holds more than ca.crt: the CA's key (ca.key) is in the same Secret; list items: [{key: ca.crt}]", at, src.Volume.Secret.SecretName))
	}
	return v
}

// hbaRule is one pg_hba line, by its fields.
type hbaRule struct {
	typ, db, user, method string
	line                  string
}

// parseHBA splits pg_hba lines into rules; an address (every TCP type has
// one) is skipped, options after the method are ignored.
func parseHBA(lines []string) []hbaRule {
	var rules []hbaRule
	for _, l := range lines {
		f := strings.Fields(l)
		if i := slices.IndexFunc(f, func(s string) bool { return strings.HasPrefix(s, "#") }); i >= 0 {
			f = f[:i]
		}
		n := 4 // type db user address method
		if len(f) > 0 && f[0] == "local" {
			n = 3
		}
		if len(f) < n+1 {
			rules = append(rules, hbaRule{line: l})
			continue
		}
		rules = append(rules, hbaRule{typ: f[0], db: f[1], user: f[2], method: f[n], line: l})
	}
	return rules
}

// listHas says whether a rule's comma-separated database or user list
// covers name: by name or by "all" (group and file references are not
// followed).
func listHas(list, name string) bool {
	return slices.ContainsFunc(strings.Split(list, ","), func(s string) bool { return s == "all" || s == name })
}

// checkHBA checks a Cluster's user-defined pg_hba rules, which CNPG places
// after its fixed ones (local peer; hostssl cert for streaming_replica and
// the pooler) and before its default "host all all all scram-sha-256":
//
//   - a "hostnossl all all all reject" (or host ... reject) comes before any
//     host or hostnossl rule that would take a connection without TLS, so
//     that CNPG's default never sees one;
//   - no rule authenticates by trust, password (in the clear) or md5;
//   - a hostssl scram-sha-256 rule covers the database for every role
//     (the owner for migrations, the app role), before anything else
//     that would take them over TLS.
func checkHBA(co Object, lines []string, db string, roles []string) []string {
	weak := []string{"trust", "password", "md5"}
	var v []string
	closed := false
	scram := map[string]bool{}
	for _, r := range parseHBA(lines) {
		switch {
		case r.typ == "":
			v = append(v, fmt.Sprintf("%s: pg_hba %q is not a rule (type database user [address] method)", co, r.line))
			continue
		case slices.Contains(weak, r.method):
			v = append(v, fmt.Sprintf("%s: pg_hba %q authenticates by %s, want scram-sha-256 (or cert)", co, r.line, r.method))
		}
		tcp := r.typ == "host" || r.typ == "hostnossl"
		if tcp && !closed {
			if r.method != "reject" {
				v = append(v, fmt.Sprintf("%s: pg_hba %q takes connections without TLS", co, r.line))
			} else if r.db == "all" && r.user == "all" {
				closed = true
			}
		}
		if r.typ == "hostssl" || r.typ == "host" {
			for _, role := range roles {
				if _, seen := scram[role]; !seen && listHas(r.db, db) && listHas(r.user, role) {
					scram[role] = r.method == "scram-sha-256"
				}
			}
		}
	}
	if !closed {
		v = append(v, fmt.Sprintf("%s: pg_hba has no \"hostnossl all all all reject\": CNPG's default rule (host all all all scram-sha-256) takes a password over plaintext", co))
	}
	for _, role := range roles {
		if !scram[role] {
			v = append(v, fmt.Sprintf("%s: pg_hba: role %s reaches database %s over TLS by no hostssl scram-sha-256 rule of its own (the first rule to match it must be one)", co, role, db))
		}
	}
	return v
}
