package check

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	barmanapi "github.com/cloudnative-pg/barman-cloud/pkg/api"
	cnpgv1 "github.com/cloudnative-pg/cloudnative-pg/api/v1"
	machineryapi "github.com/cloudnative-pg/machinery/pkg/api"
	barmanv1 "github.com/cloudnative-pg/plugin-barman-cloud/api/v1"
	networkingv1 "k8s.io/api/networking/v1"
)

// archiverOf is a Cluster's Barman Cloud plugin entry.
func archiverOf(t *testing.T, c *cnpgv1.Cluster) *cnpgv1.PluginConfiguration {
	t.Helper()
	for i := range c.Spec.Plugins {
		if c.Spec.Plugins[i].Name == BarmanCloudPlugin {
			return &c.Spec.Plugins[i]
		}
	}
	t.Fatalf("Cluster %s/%s has no %s entry", c.Namespace, c.Name, BarmanCloudPlugin)
	return nil
}

// TestBackupRendered: as rendered, every cell's Cluster archives under
// its own name, the cell's ID (the overlay's namespace sets the plugin's
// serverName), and its ObjectStore takes the keys from the Secret the
// cell's kustomization generated, by its hashed name.
func TestBackupRendered(t *testing.T) {
	w := NewWorld(renderAll(t, deployDir))
	seen := map[string]string{}
	for _, ns := range w.Cells {
		co, ok := w.get("Cluster", ns, "postgres")
		if !ok {
			t.Fatalf("%s: no Cluster postgres", ns)
		}
		cl := co.Typed.(*cnpgv1.Cluster)
		if got := archiverOf(t, cl).Parameters["serverName"]; got != ns {
			t.Errorf("%s: serverName %q, want the namespace", ns, got)
		}
		loc, ok := clusterArchive(w, co)
		if !ok {
			t.Fatalf("%s: no archive", ns)
		}
		if other, dup := seen[loc]; dup {
			t.Errorf("%s and %s archive to %s", ns, other, loc)
		}
		seen[loc] = ns
		so, _ := w.get(ObjectStoreKind, ns, "backups")
		s3 := so.Typed.(*barmanv1.ObjectStore).Spec.Configuration.AWS
		if s3 == nil || s3.AccessKeyIDReference == nil || !strings.HasPrefix(s3.AccessKeyIDReference.Name, "backup-object-store-") {
			t.Errorf("%s: the ObjectStore's keys are not from the generated Secret (its name with the content hash): %+v", ns, s3)
		}
	}
	t.Logf("archives: %v", seen)
}

// TestBackupChecksCatch breaks each cell's backups one way at a time (the
// archiver, where it archives, the object store, its credentials, the
// instances' way out, the schedule) and expects each to be reported.
func TestBackupChecksCatch(t *testing.T) {
	base := renderAll(t, deployDir)
	if v := Check(base); len(v) != 0 {
		t.Fatalf("the committed manifests: %v", v)
	}
	cluster := func(ns string, change func(c *cnpgv1.Cluster)) []Object {
		return withObject(t, base, "Cluster", ns, "postgres", change)
	}
	store := func(change func(s *barmanv1.ObjectStore)) []Object {
		return withObject(t, base, ObjectStoreKind, "cell-a", "backups", change)
	}
	config := func(change func(c *barmanapi.BarmanObjectStoreConfiguration)) []Object {
		return store(func(s *barmanv1.ObjectStore) { change(&s.Spec.Configuration) })
	}
	schedule := func(change func(s *cnpgv1.ScheduledBackup)) []Object {
		return withObject(t, base, "ScheduledBackup", "cell-b", "postgres-daily", change)
	}
	const (
		store_ = "ObjectStore cell-a/backups: "
		noSB   = "Cluster cell-b/postgres: no ScheduledBackup takes a base backup of it through barman-cloud.cloudnative-pg.io at least every 24h0m0s"
	)
	cases := []brokenCase{
		{"no WAL archiver", cluster("cell-a", func(c *cnpgv1.Cluster) { c.Spec.Plugins = nil }),
			[]string{"Cluster cell-a/postgres: 0 WAL archivers (spec.plugins, isWALArchiver), want one, the Barman Cloud plugin"}},
		{"the plugin not archiving WAL", cluster("cell-a", func(c *cnpgv1.Cluster) { archiverOf(t, c).IsWALArchiver = new(false) }),
			[]string{"Cluster cell-a/postgres: 0 WAL archivers"}},
		{"the plugin disabled", cluster("cell-c", func(c *cnpgv1.Cluster) { archiverOf(t, c).Enabled = new(false) }),
			[]string{"Cluster cell-c/postgres: 0 WAL archivers"}},
		{"another archiver", cluster("cell-a", func(c *cnpgv1.Cluster) { archiverOf(t, c).Name = "archiver.example.com" }),
			[]string{"Cluster cell-a/postgres: WAL archiver archiver.example.com, want barman-cloud.cloudnative-pg.io"}},
		{"an object store not rendered", cluster("cell-a", func(c *cnpgv1.Cluster) { archiverOf(t, c).Parameters["barmanObjectName"] = "elsewhere" }),
			[]string{`Cluster cell-a/postgres: its WAL archiver names ObjectStore "elsewhere" (barmanObjectName), which is not rendered in cell-a`}},
		{"the in-tree archiver besides", cluster("cell-a", func(c *cnpgv1.Cluster) {
			c.Spec.Backup = &cnpgv1.BackupConfiguration{BarmanObjectStore: &barmanapi.BarmanObjectStoreConfiguration{DestinationPath: "s3://b/"}}
		}), []string{"Cluster cell-a/postgres: spec.backup.barmanObjectStore is set"}},
		{"two cells in one place", cluster("cell-b", func(c *cnpgv1.Cluster) { archiverOf(t, c).Parameters["serverName"] = "cell-a" }),
			[]string{"Cluster cell-b/postgres: archives to s3://cellpay-backups/cell-a, as Cluster cell-a/postgres does",
				"Cluster cell-a/postgres: archives to s3://cellpay-backups/cell-a, as Cluster cell-b/postgres does"}},
		{"cells under the Cluster's name", withObject(t, cluster("cell-a", func(c *cnpgv1.Cluster) { delete(archiverOf(t, c).Parameters, "serverName") }),
			"Cluster", "cell-c", "postgres", func(c *cnpgv1.Cluster) { delete(archiverOf(t, c).Parameters, "serverName") }),
			[]string{"Cluster cell-a/postgres: archives to s3://cellpay-backups/postgres, as Cluster cell-c/postgres does"}},
		{"no retention", store(func(s *barmanv1.ObjectStore) { s.Spec.RetentionPolicy = "" }),
			[]string{store_ + `retentionPolicy "", want a recovery window such as 30d`}},
		{"a retention the plugin cannot read", store(func(s *barmanv1.ObjectStore) { s.Spec.RetentionPolicy = "30 days" }),
			[]string{store_ + `retentionPolicy "30 days"`}},
		{"WAL uncompressed", config(func(c *barmanapi.BarmanObjectStoreConfiguration) { c.Wal.Compression = barmanapi.CompressionTypeNone }),
			[]string{store_ + "WAL is archived uncompressed"}},
		{"no WAL settings", config(func(c *barmanapi.BarmanObjectStoreConfiguration) { c.Wal = nil }),
			[]string{store_ + "WAL is archived uncompressed"}},
		{"a local path", config(func(c *barmanapi.BarmanObjectStoreConfiguration) { c.DestinationPath = "/var/lib/backups" }),
			[]string{store_ + `destinationPath "/var/lib/backups" is no object store's`}},
		{"an endpoint in the clear", config(func(c *barmanapi.BarmanObjectStoreConfiguration) { c.EndpointURL = "http://minio.example.com" }),
			[]string{store_ + `endpointURL "http://minio.example.com" is not HTTPS`}},
		{"an endpoint the instances cannot reach", config(func(c *barmanapi.BarmanObjectStoreConfiguration) { c.EndpointURL = "https://minio.example.com:9000" }),
			[]string{store_ + `endpointURL "https://minio.example.com:9000" is on port 9000: the Postgres instances' egress (postgres-egress) opens 443 only`}},
		{"no credentials", config(func(c *barmanapi.BarmanObjectStoreConfiguration) { c.AWS = nil }),
			[]string{store_ + "0 providers' credentials"}},
		{"half the keys", config(func(c *barmanapi.BarmanObjectStoreConfiguration) { c.AWS.SecretAccessKeyReference = nil }),
			[]string{store_ + "spec.configuration.s3Credentials: Invalid value", "both accessKeyId and secretAccessKey must be provided"}},
		{"two ways to authenticate", config(func(c *barmanapi.BarmanObjectStoreConfiguration) { c.AWS.InheritFromIAMRole = true }),
			[]string{store_ + "spec.configuration.s3Credentials: Invalid value", "only one AWS authentication method should be supplied"}},
		{"keys from a Secret not rendered", config(func(c *barmanapi.BarmanObjectStoreConfiguration) {
			c.AWS.AccessKeyIDReference = &machineryapi.SecretKeySelector{LocalObjectReference: machineryapi.LocalObjectReference{Name: "backup-object-store"}, Key: "ACCESS_KEY_ID"}
		}), []string{store_ + `credentials from Secret "backup-object-store", which is not rendered in cell-a`}},
		{"a key the Secret lacks", config(func(c *barmanapi.BarmanObjectStoreConfiguration) { c.AWS.SecretAccessKeyReference.Key = "SECRET" }),
			[]string{store_ + `credentials from key "SECRET" of Secret backup-object-store-`}},
		{"the instances shut in", withObject(t, base, "NetworkPolicy", "cell-a", "postgres-egress", func(p *networkingv1.NetworkPolicy) {
			p.Spec.Egress = p.Spec.Egress[:2] // each other and DNS only
		}), []string{"cell-a/postgres cannot reach public addresses", "on 443/TCP: its WAL and base backups cannot reach the object store"}},
		{"no schedule", without(base, "ScheduledBackup", "cell-b", "postgres-daily"), []string{noSB}},
		{"a snapshot schedule", schedule(func(s *cnpgv1.ScheduledBackup) { s.Spec.Method = cnpgv1.BackupMethodVolumeSnapshot }),
			[]string{noSB + ` (ScheduledBackup cell-b/postgres-daily: method "volumeSnapshot", want plugin through barman-cloud.cloudnative-pg.io)`}},
		{"a schedule suspended", schedule(func(s *cnpgv1.ScheduledBackup) { s.Spec.Suspend = new(true) }),
			[]string{noSB + " (ScheduledBackup cell-b/postgres-daily: suspended)"}},
		{"a weekly schedule", schedule(func(s *cnpgv1.ScheduledBackup) { s.Spec.Schedule = "0 30 2 * * 0" }),
			[]string{noSB + ` (ScheduledBackup cell-b/postgres-daily: schedule "0 30 2 * * 0" does not run every day)`}},
		{"a Kubernetes CronJob's schedule", schedule(func(s *cnpgv1.ScheduledBackup) { s.Spec.Schedule = "30 2 * * *" }),
			[]string{noSB + ` (ScheduledBackup cell-b/postgres-daily: schedule "30 2 * * *" has 5 fields, want CNPG's six (seconds first))`}},
		{"another Cluster's schedule", schedule(func(s *cnpgv1.ScheduledBackup) { s.Spec.Cluster.Name = "other" }), []string{noSB}},
	}
	checkBroken(t, cases)
	// The ways the checks take besides the shipped one: an identity of
	// the pod's instead of keys, a schedule that runs more often.
	for name, objs := range map[string][]Object{
		"IAM role": config(func(c *barmanapi.BarmanObjectStoreConfiguration) {
			c.AWS = &barmanapi.S3Credentials{InheritFromIAMRole: true}
		}),
		"every six hours": schedule(func(s *cnpgv1.ScheduledBackup) { s.Spec.Schedule = "0 0 */6 * * *" }),
		"hourly":          schedule(func(s *cnpgv1.ScheduledBackup) { s.Spec.Schedule = "@hourly" }),
		"an S3-compatible store": config(func(c *barmanapi.BarmanObjectStoreConfiguration) {
			c.EndpointURL = "https://objects.example.com"
		}),
	} {
		if v := Check(objs); len(v) != 0 {
			t.Errorf("%s: %v", name, v)
		}
	}
}

// TestBackupPerOverlay: an overlay sends its cell's backups to a store of
// its own, with keys of its own (a patch of ObjectStore backups and a
// secretGenerator that replaces the base's), as docs/kubernetes.md says,
// and the checks follow it.
func TestBackupPerOverlay(t *testing.T) {
	dir := t.TempDir()
	if err := os.CopyFS(dir, os.DirFS(deployDir)); err != nil {
		t.Fatal(err)
	}
	kust := filepath.Join(dir, "overlays", "cell-b", "kustomization.yaml")
	b, err := os.ReadFile(kust)
	if err != nil {
		t.Fatal(err)
	}
	b = append(b, []byte(`  - name: backup-object-store
    behavior: replace
    files:
      - ACCESS_KEY_ID=secrets/backup-access-key-id
      - ACCESS_SECRET_KEY=secrets/backup-secret-access-key
patches:
  - target: {group: barmancloud.cnpg.io, kind: ObjectStore, name: backups}
    patch: |-
      - {op: replace, path: /spec/configuration/destinationPath, value: "s3://cell-b-backups/"}
      - {op: add, path: /spec/configuration/endpointURL, value: "https://objects.example.com"}
`)...)
	if err := os.WriteFile(kust, b, 0o644); err != nil {
		t.Fatal(err)
	}
	objs := renderAll(t, dir)
	for _, v := range Check(objs) {
		t.Error(v)
	}
	w := NewWorld(objs)
	co, _ := w.get("Cluster", "cell-b", "postgres")
	if loc, _ := clusterArchive(w, co); loc != "s3://cell-b-backups/cell-b" {
		t.Errorf("cell-b archives to %s, want s3://cell-b-backups/cell-b", loc)
	}
	so, _ := w.get(ObjectStoreKind, "cell-b", "backups")
	cfg := so.Typed.(*barmanv1.ObjectStore).Spec.Configuration
	if cfg.EndpointURL != "https://objects.example.com" {
		t.Errorf("cell-b's endpoint %q", cfg.EndpointURL)
	}
	secret := func(ns string) string {
		so, _ := w.get(ObjectStoreKind, ns, "backups")
		return so.Typed.(*barmanv1.ObjectStore).Spec.Configuration.AWS.AccessKeyIDReference.Name
	}
	if _, ok := w.get("Secret", "cell-b", secret("cell-b")); !ok {
		t.Errorf("cell-b's ObjectStore names Secret %s, not rendered", secret("cell-b"))
	}
	if co, _ := w.get("Cluster", "cell-a", "postgres"); !strings.HasPrefix(mustArchive(t, w, co), "s3://cellpay-backups/") {
		t.Errorf("cell-a moved with cell-b: %s", mustArchive(t, w, co))
	}
}

func mustArchive(t *testing.T, w *World, co Object) string {
	t.Helper()
	loc, ok := clusterArchive(w, co)
	if !ok {
		t.Fatalf("%s archives nowhere", co)
	}
	return loc
}

func TestBackupSchedule(t *testing.T) {
	for s, ok := range map[string]bool{
		"0 30 2 * * *": true, "0 0 */6 * * ?": true, "0 0 0 * * *": true, "@daily": true, "@every 12h": true,
		"0 30 2 * * 1-5": false, "0 0 0 1 * *": false, "30 2 * * *": false, "@weekly": false, "@every 48h": false, "": false,
	} {
		if got := backupSchedule(s) == ""; got != ok {
			t.Errorf("backupSchedule(%q) = %q, want ok %v", s, backupSchedule(s), ok)
		}
	}
}

// TestRestoreProcedureRenders renders the restore kustomization of
// docs/operations.md ("Backups, and restoring a cell's database") over the
// cell's overlay, as written there: the Cluster it makes bootstraps by
// recovery from the place the cell archives to (its ObjectStore, under its
// own server name), keeps archiving there, and decodes strictly.
func TestRestoreProcedureRenders(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join(deployDir, "..", "..", "docs", "operations.md"))
	if err != nil {
		t.Fatal(err)
	}
	const marker = "# restore-cell-b/kustomization.yaml\n"
	_, block, ok := strings.Cut(string(doc), marker)
	if !ok {
		t.Fatalf("docs/operations.md has no %q block", strings.TrimSpace(marker))
	}
	block, _, _ = strings.Cut(block, "```")
	var lines []string
	for _, l := range strings.Split(block, "\n") {
		lines = append(lines, strings.TrimPrefix(l, "   ")) // the list item's indent
	}
	kust := strings.Replace(strings.Join(lines, "\n"), "../deploy/k8s/overlays/cell-b", "../overlays/cell-b", 1)
	if !strings.Contains(kust, "../overlays/cell-b") {
		t.Fatalf("the restore kustomization does not take the cell's overlay:\n%s", kust)
	}
	tree := loadTree(t, deployDir)
	if err := tree.FS.WriteFile(filepath.Join(Root, "restore-cell-b", "kustomization.yaml"), []byte(kust)); err != nil {
		t.Fatal(err)
	}
	objs, err := tree.Render("restore-cell-b")
	if err != nil {
		t.Fatal(err)
	}
	w := NewWorld(objs)
	co, ok := w.get("Cluster", "cell-b", "postgres")
	if !ok {
		t.Fatal("no Cluster cell-b/postgres rendered")
	}
	cl := co.Typed.(*cnpgv1.Cluster)
	b := cl.Spec.Bootstrap
	if b == nil || b.InitDB != nil || b.Recovery == nil || b.Recovery.Source == "" {
		t.Fatalf("bootstrap %+v, want recovery alone", b)
	}
	ext, ok := cl.ExternalCluster(b.Recovery.Source)
	if !ok || ext.PluginConfiguration == nil || ext.PluginConfiguration.Name != BarmanCloudPlugin {
		t.Fatalf("recovery source %q: %+v, want the Barman Cloud plugin", b.Recovery.Source, ext)
	}
	archives := mustArchive(t, w, co)
	so, ok := w.get(ObjectStoreKind, "cell-b", ext.PluginConfiguration.Parameters["barmanObjectName"])
	if !ok {
		t.Fatalf("the recovery source names ObjectStore %q, not rendered", ext.PluginConfiguration.Parameters["barmanObjectName"])
	}
	reads := strings.TrimSuffix(so.Typed.(*barmanv1.ObjectStore).Spec.Configuration.DestinationPath, "/") + "/" + ext.PluginConfiguration.Parameters["serverName"]
	if reads != archives {
		t.Errorf("the restore reads %s, the cell archives to %s", reads, archives)
	}
	if cl.Annotations["cnpg.io/skipEmptyWalArchiveCheck"] != "enabled" {
		t.Errorf("annotations %v: the restored Cluster archives into a non-empty archive, and must say so", cl.Annotations)
	}
}
