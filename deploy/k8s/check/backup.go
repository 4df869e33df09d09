package check

import (
	"fmt"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"time"

	barmanapi "github.com/cloudnative-pg/barman-cloud/pkg/api"
	cnpgv1 "github.com/cloudnative-pg/cloudnative-pg/api/v1"
	machineryapi "github.com/cloudnative-pg/machinery/pkg/api"
	barmanv1 "github.com/cloudnative-pg/plugin-barman-cloud/api/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// The cells' backups are CloudNativePG's Barman Cloud plugin's
// (github.com/cloudnative-pg/plugin-barman-cloud, installed beside the
// operator): an ObjectStore (barmancloud.cnpg.io/v1) per cell, the
// Cluster's WAL archiver, and ScheduledBackups of method plugin.
const (
	// BarmanCloudPlugin is the plugin's name, as a Cluster and a
	// ScheduledBackup name it.
	BarmanCloudPlugin = "barman-cloud.cloudnative-pg.io"
	// ObjectStoreKind is the plugin's kind for an object store.
	ObjectStoreKind = "ObjectStore"
	// MaxBackupInterval is the longest a cell may go between base backups:
	// the WAL to replay after the newest one grows with it, and so does
	// the time a restore takes.
	MaxBackupInterval = 24 * time.Hour
	// ObjectStorePort is where the Postgres instances reach the object
	// store: HTTPS, the port their egress policy (postgres-egress) opens
	// to every address.
	ObjectStorePort = 443
)

// The plugin's ObjectStore is decoded as strictly as the other kinds: its
// Go API types join Scheme here, beside its CRD in the server-side dry run
// (envtest_test.go).
func init() { barmanv1.AddKnownTypes(Scheme) }

// retentionPolicy is the plugin's form of a recovery window: a count of
// days, weeks or months.
var retentionPolicy = regexp.MustCompile(`^[1-9][0-9]*[dwm]$`)

// CheckBackup checks that cell ns's Postgres, Cluster co, can be restored
// from an object store, as docs/operations.md restores it:
//
//   - the Cluster's WAL archiver is the Barman Cloud plugin (one
//     spec.plugins entry with isWALArchiver, not disabled), naming
//     (barmanObjectName) an ObjectStore of its namespace; never the
//     in-tree spec.backup.barmanObjectStore besides;
//   - it archives where no other cell does: the ObjectStore's
//     destinationPath and the Cluster's serverName (the plugin parameter,
//     else the Cluster's name) differ from every other cell's, since two
//     servers' WAL in one place cannot be told apart, and the second is
//     refused its archive;
//   - the ObjectStore has a destination (s3://, gs:// or an https://
//     Azure URL), an endpoint, if any, over HTTPS on the port the
//     instances' egress opens (443), a retention policy (a recovery
//     window, [1-9][0-9]*[dwm]), compressed WAL, and credentials from
//     Secrets: one of the providers', whole as barman-cloud's own
//     validation has them, each key of a Secret rendered in the
//     namespace that holds that key (or an identity of the pod's: IAM
//     role, Azure AD, GKE);
//   - the instances may reach the object store: every public address on
//     443;
//   - a ScheduledBackup of the Cluster, method plugin through the Barman
//     Cloud plugin, not suspended, takes a base backup at least every
//     MaxBackupInterval.
func CheckBackup(w *World, ns string, co Object) []string {
	cl := co.Typed.(*cnpgv1.Cluster)
	var v []string
	if cl.Spec.Backup != nil && cl.Spec.Backup.BarmanObjectStore != nil {
		v = append(v, fmt.Sprintf("%s: spec.backup.barmanObjectStore is set: WAL is archived by the Barman Cloud plugin (spec.plugins), never by the in-tree archiver besides", co))
	}
	var archivers []cnpgv1.PluginConfiguration
	for _, p := range cl.Spec.Plugins {
		if p.IsWALArchiver != nil && *p.IsWALArchiver && (p.Enabled == nil || *p.Enabled) {
			archivers = append(archivers, p)
		}
	}
	if len(archivers) != 1 {
		return append(v, fmt.Sprintf("%s: %d WAL archivers (spec.plugins, isWALArchiver), want one, the Barman Cloud plugin: without it no WAL reaches an object store and the cell cannot be restored", co, len(archivers)))
	}
	p := archivers[0]
	if p.Name != BarmanCloudPlugin {
		v = append(v, fmt.Sprintf("%s: WAL archiver %s, want %s", co, p.Name, BarmanCloudPlugin))
	}
	storeName := p.Parameters["barmanObjectName"]
	so, ok := w.get(ObjectStoreKind, ns, storeName)
	if !ok {
		return append(v, fmt.Sprintf("%s: its WAL archiver names ObjectStore %q (barmanObjectName), which is not rendered in %s", co, storeName, ns))
	}
	store := so.Typed.(*barmanv1.ObjectStore)
	v = append(v, objectStore(w, ns, so, store)...)
	here := archiveLocation(cl, store)
	for _, other := range w.Cells {
		if other == ns {
			continue
		}
		for _, oo := range w.Find("Cluster", other) {
			if loc, ok := clusterArchive(w, oo); ok && loc == here {
				v = append(v, fmt.Sprintf("%s: archives to %s, as %s does: give each cell a serverName (the plugin parameter) or destinationPath of its own", co, here, oo))
			}
		}
	}
	if pg, ok := w.pod(ns, cl.Name); ok {
		allowed := w.Net.egressAddrs(pg, ObjectStorePort, corev1.ProtocolTCP)
		if gaps := missing(public, allowed, 0); len(gaps) > 0 {
			v = append(v, fmt.Sprintf("%s cannot reach public addresses %s on %d/TCP: its WAL and base backups cannot reach the object store", pg, some(gaps), ObjectStorePort))
		}
	}
	return append(v, scheduledBackups(w, ns, co, cl)...)
}

// archiveLocation is where a Cluster's WAL and base backups go in the
// object store: the destination's path, and under it the server name.
func archiveLocation(cl *cnpgv1.Cluster, store *barmanv1.ObjectStore) string {
	server := cl.Name
	for _, p := range cl.Spec.Plugins {
		if p.Name == BarmanCloudPlugin && p.Parameters["serverName"] != "" {
			server = p.Parameters["serverName"]
		}
	}
	return strings.TrimSuffix(store.Spec.Configuration.DestinationPath, "/") + "/" + server
}

// clusterArchive is archiveLocation of Cluster o, if it has the plugin's
// archiver and its ObjectStore is rendered.
func clusterArchive(w *World, o Object) (string, bool) {
	cl := o.Typed.(*cnpgv1.Cluster)
	for _, p := range cl.Spec.Plugins {
		if p.Name != BarmanCloudPlugin || p.IsWALArchiver == nil || !*p.IsWALArchiver {
			continue
		}
		if so, ok := w.get(ObjectStoreKind, o.Namespace, p.Parameters["barmanObjectName"]); ok {
			return archiveLocation(cl, so.Typed.(*barmanv1.ObjectStore)), true
		}
	}
	return "", false
}

// objectStore checks an ObjectStore's destination, retention, WAL
// compression and credentials.
func objectStore(w *World, ns string, so Object, store *barmanv1.ObjectStore) []string {
	var v []string
	cfg := store.Spec.Configuration
	if u, err := url.Parse(cfg.DestinationPath); err != nil || !slices.Contains([]string{"s3", "gs", "https"}, u.Scheme) || u.Host == "" {
		v = append(v, fmt.Sprintf("%s: destinationPath %q is no object store's (s3://BUCKET/..., gs://BUCKET/..., https://ACCOUNT.blob.../CONTAINER/...)", so, cfg.DestinationPath))
	}
	if cfg.EndpointURL != "" {
		u, err := url.Parse(cfg.EndpointURL)
		switch {
		case err != nil || u.Host == "":
			v = append(v, fmt.Sprintf("%s: endpointURL %q is not a URL", so, cfg.EndpointURL))
		case u.Scheme != "https":
			v = append(v, fmt.Sprintf("%s: endpointURL %q is not HTTPS: the store's keys and the cell's data would cross the network in the clear", so, cfg.EndpointURL))
		case u.Port() != "" && u.Port() != fmt.Sprint(ObjectStorePort):
			v = append(v, fmt.Sprintf("%s: endpointURL %q is on port %s: the Postgres instances' egress (postgres-egress) opens %d only", so, cfg.EndpointURL, u.Port(), ObjectStorePort))
		}
	}
	if !retentionPolicy.MatchString(store.Spec.RetentionPolicy) {
		v = append(v, fmt.Sprintf("%s: retentionPolicy %q, want a recovery window such as 30d: without one, base backups and WAL pile up in the store for ever", so, store.Spec.RetentionPolicy))
	}
	if cfg.Wal == nil || cfg.Wal.Compression == barmanapi.CompressionTypeNone {
		v = append(v, fmt.Sprintf("%s: WAL is archived uncompressed (configuration.wal.compression)", so))
	}
	return append(v, credentials(w, ns, so, cfg.BarmanCredentials)...)
}

// credentials checks that an ObjectStore authenticates one way, as
// barman-cloud validates it, and that every key it names is in a Secret
// rendered in its namespace.
func credentials(w *World, ns string, so Object, c barmanapi.BarmanCredentials) []string {
	var (
		errs field.ErrorList
		refs []*machineryapi.SecretKeySelector
		n    int
	)
	path := field.NewPath("spec", "configuration")
	if c.AWS != nil {
		n++
		errs = append(errs, c.AWS.ValidateAwsCredentials(path.Child("s3Credentials"))...)
		refs = append(refs, c.AWS.AccessKeyIDReference, c.AWS.SecretAccessKeyReference, c.AWS.RegionReference, c.AWS.SessionToken)
	}
	if c.Azure != nil {
		n++
		errs = append(errs, c.Azure.ValidateAzureCredentials(path.Child("azureCredentials"))...)
		refs = append(refs, c.Azure.ConnectionString, c.Azure.StorageAccount, c.Azure.StorageKey, c.Azure.StorageSasToken)
	}
	if c.Google != nil {
		n++
		errs = append(errs, c.Google.ValidateGCSCredentials(path.Child("googleCredentials"))...)
		refs = append(refs, c.Google.ApplicationCredentials)
	}
	if n != 1 {
		return []string{fmt.Sprintf("%s: %d providers' credentials (s3Credentials, azureCredentials, googleCredentials), want one", so, n)}
	}
	var v []string
	for _, e := range errs {
		v = append(v, fmt.Sprintf("%s: %s", so, e.Error()))
	}
	for _, r := range refs {
		if r == nil {
			continue
		}
		o, ok := w.get("Secret", ns, r.Name)
		if !ok {
			v = append(v, fmt.Sprintf("%s: credentials from Secret %q, which is not rendered in %s", so, r.Name, ns))
			continue
		}
		if _, ok := secretData(o.Typed.(*corev1.Secret))[r.Key]; !ok || r.Key == "" {
			v = append(v, fmt.Sprintf("%s: credentials from key %q of Secret %s, which has no such key", so, r.Key, r.Name))
		}
	}
	return v
}

// scheduledBackups checks that a ScheduledBackup of Cluster co takes a
// base backup through the plugin at least every MaxBackupInterval.
func scheduledBackups(w *World, ns string, co Object, cl *cnpgv1.Cluster) []string {
	var why []string
	for _, o := range w.Find("ScheduledBackup", ns) {
		sb := o.Typed.(*cnpgv1.ScheduledBackup)
		if sb.Spec.Cluster.Name != cl.Name {
			continue
		}
		var wrong []string
		if sb.Spec.Method != cnpgv1.BackupMethodPlugin || sb.Spec.PluginConfiguration == nil || sb.Spec.PluginConfiguration.Name != BarmanCloudPlugin {
			wrong = append(wrong, fmt.Sprintf("method %q, want %s through %s", sb.Spec.Method, cnpgv1.BackupMethodPlugin, BarmanCloudPlugin))
		}
		if sb.Spec.Suspend != nil && *sb.Spec.Suspend {
			wrong = append(wrong, "suspended")
		}
		if msg := backupSchedule(sb.Spec.Schedule); msg != "" {
			wrong = append(wrong, msg)
		}
		if len(wrong) == 0 {
			return nil
		}
		why = append(why, fmt.Sprintf("%s: %s", o, strings.Join(wrong, ", ")))
	}
	msg := fmt.Sprintf("%s: no ScheduledBackup takes a base backup of it through %s at least every %v", co, BarmanCloudPlugin, MaxBackupInterval)
	if len(why) > 0 {
		msg += " (" + strings.Join(why, "; ") + ")"
	}
	return []string{msg + ": the WAL to replay, and a restore's time, grow without bound"}
}

// backupSchedule says what keeps a ScheduledBackup's schedule, CNPG's
// six-field cron (seconds first) or a descriptor, from running at least
// every MaxBackupInterval, or "". A six-field schedule does when its day
// of the month, month and day of the week are every one ("*" or "?").
func backupSchedule(s string) string {
	switch {
	case s == "@daily" || s == "@midnight" || s == "@hourly":
		return ""
	case strings.HasPrefix(s, "@every "):
		d, err := time.ParseDuration(strings.TrimPrefix(s, "@every "))
		if err != nil || d <= 0 || d > MaxBackupInterval {
			return fmt.Sprintf("schedule %q runs less often than every %v", s, MaxBackupInterval)
		}
		return ""
	case strings.HasPrefix(s, "@"):
		return fmt.Sprintf("schedule %q runs less often than every %v", s, MaxBackupInterval)
	}
	f := strings.Fields(s)
	if len(f) != 6 {
		return fmt.Sprintf("schedule %q has %d fields, want CNPG's six (seconds first)", s, len(f))
	}
	for _, x := range f[3:] {
		if x != "*" && x != "?" {
			return fmt.Sprintf("schedule %q does not run every day", s)
		}
	}
	return ""
}
