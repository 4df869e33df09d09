//go:build envtest

// The server-side dry run: every overlay applied with dryRun=All and strict
// field validation against a real kube-apiserver and etcd, with
// cert-manager's, approver-policy's, CloudNativePG's and the Prometheus
// Operator's CRDs installed (crdSources). It runs only from
// scripts/k8s-envtest.sh, which builds and caches the binaries and sets
// CELLPAY_ENVTEST=1, CELLPAY_KUBE_APISERVER and CELLPAY_ETCD. Under the tag
// but without them it fails rather than skips, so that a CI step can never
// pass without having talked to a server.

package check

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/restmapper"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"
)

// syncBuffer collects the servers' output for the log of a failed run.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

type applier struct {
	dyn    dynamic.Interface
	mapper meta.RESTMapper
}

// apply sends obj as a server-side apply; dryRun asks the server to run
// admission and validation and store nothing.
func (a *applier) apply(ctx context.Context, o Object, dryRun bool) error {
	m, err := a.mapper.RESTMapping(o.GVK.GroupKind(), o.GVK.Version)
	if err != nil {
		return err
	}
	body, err := yaml.YAMLToJSON(o.YAML)
	if err != nil {
		return err
	}
	opts := metav1.PatchOptions{FieldManager: "cellpay-k8s-check", Force: new(true), FieldValidation: "Strict"}
	if dryRun {
		opts.DryRun = []string{metav1.DryRunAll}
	}
	var r dynamic.ResourceInterface = a.dyn.Resource(m.Resource)
	if m.Scope.Name() == meta.RESTScopeNameNamespace {
		r = a.dyn.Resource(m.Resource).Namespace(o.Namespace)
	}
	_, err = r.Patch(ctx, o.Name, types.ApplyPatchType, body, opts)
	return err
}

// crdSource is a Go module that ships CRDs of kinds the manifests use. It
// is the module whose Go API types Scheme decodes with (go.mod), so that
// the client-side and the server-side checks are of one version; the
// files are read from the module cache, where building this test has put
// the module, and none is copied into the repo.
type crdSource struct {
	module string
	// versionOf, when set, is the module of go.mod whose version to take
	// module at: module itself is not a dependency (its Go API types are
	// versionOf's), so `go mod download` fetches it at that version.
	versionOf string
	dir       string   // inside the module
	files     []string // plain controller-gen output
}

// crdSources: cert-manager's from its deploy/crds (its own install bundles
// them the same way), CloudNativePG's Cluster and ScheduledBackup from
// config/crd/bases (its release manifest is built from them), and so its
// Barman Cloud plugin's ObjectStore. Installing is all either needs
// here: no controller runs, so nothing is issued or created, and a dry run
// only validates.
var crdSources = []crdSource{
	{module: "github.com/cert-manager/cert-manager", dir: "deploy/crds", files: []string{
		"cert-manager.io_certificates.yaml",
		"cert-manager.io_certificaterequests.yaml",
		"cert-manager.io_issuers.yaml",
		"cert-manager.io_clusterissuers.yaml",
	}},
	// approver-policy's CertificateRequestPolicy, from deploy/crds (its
	// chart's CRD template is the same schema, wrapped in Helm).
	{module: "github.com/cert-manager/approver-policy", dir: "deploy/crds", files: []string{
		"policy.cert-manager.io_certificaterequestpolicies.yaml",
	}},
	{module: "github.com/cloudnative-pg/cloudnative-pg", dir: "config/crd/bases", files: []string{
		"postgresql.cnpg.io_clusters.yaml",
		"postgresql.cnpg.io_scheduledbackups.yaml",
	}},
	// The Barman Cloud plugin's ObjectStore (the cells' backups), from its
	// module, whose API types Scheme decodes with.
	{module: "github.com/cloudnative-pg/plugin-barman-cloud", dir: "config/crd/bases", files: []string{
		"barmancloud.cnpg.io_objectstores.yaml",
	}},
	// The Prometheus Operator's, from the example/prometheus-operator-crd
	// its bundle is made of. Its API types are the separate module
	// pkg/apis/monitoring, released with the same version as the operator's
	// module, which holds the CRDs.
	{module: "github.com/prometheus-operator/prometheus-operator",
		versionOf: "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring",
		dir:       "example/prometheus-operator-crd", files: []string{
			"monitoring.coreos.com_podmonitors.yaml",
			"monitoring.coreos.com_prometheuses.yaml",
			"monitoring.coreos.com_prometheusrules.yaml",
		}},
}

// crdFiles finds the CRD files in the module cache: `go list -m` from this
// module names the directory of the version go.mod requires.
func crdFiles(t *testing.T) []string {
	t.Helper()
	var paths []string
	for _, src := range crdSources {
		var dir string
		if src.versionOf == "" {
			dir = goCmd(t, src.module, "", "list", "-m", "-f", "{{.Dir}}", src.module)
		} else {
			v := goCmd(t, src.module, "", "list", "-m", "-f", "{{.Version}}", src.versionOf)
			// Outside this module, so that go.mod and go.sum stay as
			// they are.
			out := goCmd(t, src.module, t.TempDir(), "mod", "download", "-json", src.module+"@"+v)
			var info struct{ Dir, Error string }
			if err := json.Unmarshal([]byte(out), &info); err != nil || info.Error != "" {
				t.Fatalf("locate %s's CRDs: go mod download %s@%s: %v %s", src.module, src.module, v, err, info.Error)
			}
			dir = info.Dir
		}
		if dir == "" {
			t.Fatalf("locate %s's CRDs: the module is not in the module cache (go mod download %s)", src.module, src.module)
		}
		for _, f := range src.files {
			p := filepath.Join(dir, filepath.FromSlash(src.dir), f)
			if _, err := os.Stat(p); err != nil {
				t.Fatalf("locate %s's CRDs: %v", src.module, err)
			}
			paths = append(paths, p)
		}
	}
	return paths
}

// goCmd runs the go command in dir ("" for this module's) and returns its
// output, trimmed; failing, it ends the test naming what it was locating.
func goCmd(t *testing.T, what, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("go", args...)
	cmd.Dir = dir
	out, err := cmd.Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			err = errors.New(strings.TrimSpace(string(ee.Stderr)))
		}
		t.Fatalf("locate %s's CRDs: go %s: %v %s", what, strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

// preinstalled are the namespaces that the cluster's own installs make
// (cert-manager's holds the ClusterIssuers' CA Secrets).
var preinstalled = []string{"cert-manager", "cnpg-system"}

func TestServerDryRun(t *testing.T) {
	apiserver, etcd := os.Getenv("CELLPAY_KUBE_APISERVER"), os.Getenv("CELLPAY_ETCD")
	if os.Getenv("CELLPAY_ENVTEST") != "1" || apiserver == "" || etcd == "" {
		t.Fatal("the server-side dry run needs CELLPAY_ENVTEST=1, CELLPAY_KUBE_APISERVER and CELLPAY_ETCD: run scripts/k8s-envtest.sh")
	}
	out := &syncBuffer{}
	crds := crdFiles(t)
	env := &envtest.Environment{
		ControlPlaneStartTimeout: 2 * time.Minute,
		ControlPlaneStopTimeout:  time.Minute,
		// Start installs them and waits until the server serves each kind.
		CRDInstallOptions: envtest.CRDInstallOptions{Paths: crds, ErrorIfPathMissing: true, MaxTime: time.Minute},
	}
	env.ControlPlane.APIServer = &envtest.APIServer{Path: apiserver, Out: out, Err: out}
	env.ControlPlane.Etcd = &envtest.Etcd{Path: etcd, Out: out, Err: out}
	start := time.Now()
	cfg, err := env.Start()
	if err != nil {
		t.Fatalf("start kube-apiserver and etcd: %v\n%s", err, out)
	}
	t.Cleanup(func() {
		if err := env.Stop(); err != nil {
			t.Errorf("stop control plane: %v", err)
		}
		if t.Failed() {
			t.Logf("control plane output (tail):\n%s", tail(out.String(), 4000))
		}
	})
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	v, err := dc.ServerVersion()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("kube-apiserver %s up in %s, with %d CRDs: %v", v.GitVersion, time.Since(start).Round(time.Millisecond),
		len(env.CRDs), crds)
	if len(env.CRDs) != len(crds) {
		t.Fatalf("%d CRDs installed, want %d (%v)", len(env.CRDs), len(crds), crds)
	}
	a := &applier{dyn: dynamic.NewForConfigOrDie(cfg), mapper: restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc))}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	// The tree plus a freshly generated extra cell, so that the generator's
	// output meets the server too.
	dir := t.TempDir()
	if err := os.CopyFS(dir, os.DirFS(deployDir)); err != nil {
		t.Fatal(err)
	}
	if err := NewCell(dir, newCellName); err != nil {
		t.Fatal(err)
	}
	tree := loadTree(t, dir)
	overlays, err := tree.Overlays()
	if err != nil {
		t.Fatal(err)
	}
	for _, ns := range preinstalled {
		obj := Object{GVK: schema.GroupVersionKind{Version: "v1", Kind: "Namespace"}, Name: ns,
			YAML: []byte("apiVersion: v1\nkind: Namespace\nmetadata: {name: " + ns + "}\n")}
		if err := a.apply(ctx, obj, false); err != nil {
			t.Fatalf("create namespace %s: %v", ns, err)
		}
	}
	rendered := map[string][]Object{}
	for _, o := range overlays {
		objs, err := tree.Render(o)
		if err != nil {
			t.Fatal(err)
		}
		rendered[o] = objs
		// Namespaces for real: a dry run into a namespace that does not
		// exist is refused.
		for _, obj := range objs {
			if obj.GVK.Kind == "Namespace" {
				if err := a.apply(ctx, obj, false); err != nil {
					t.Fatalf("%s: create %s: %v", o, obj, err)
				}
			}
		}
	}
	n := 0
	kinds := map[string]int{}
	for _, o := range overlays {
		t.Run(strings.TrimPrefix(o, "overlays/"), func(t *testing.T) {
			for _, obj := range rendered[o] {
				if err := a.apply(ctx, obj, true); err != nil {
					t.Errorf("%s: %v", obj, err)
				} else {
					kinds[obj.GVK.Group+"/"+obj.GVK.Kind]++
				}
				n++
			}
		})
	}
	t.Logf("%d objects of %d overlays accepted by the server (dryRun=All, fieldValidation=Strict): %v", n, len(overlays), kinds)
	for _, k := range []string{"cert-manager.io/Certificate", "cert-manager.io/Issuer", "cert-manager.io/ClusterIssuer",
		"policy.cert-manager.io/CertificateRequestPolicy", "rbac.authorization.k8s.io/Role", "rbac.authorization.k8s.io/RoleBinding", "postgresql.cnpg.io/Cluster",
		"monitoring.coreos.com/Prometheus", "monitoring.coreos.com/PodMonitor", "monitoring.coreos.com/PrometheusRule"} {
		if kinds[k] == 0 {
			t.Errorf("no %s accepted: those objects did not meet the server", k)
		}
	}

	// The server must refuse what is wrong, or the run above proves nothing.
	for name, doc := range map[string]string{
		"unknown field": "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: bad, namespace: cell-a}\nspec:\n  replicas: 1\n  selector: {matchLabels: {a: b}}\n" +
			"  template:\n    metadata: {labels: {a: b}}\n    spec: {containers: [{name: c, image: 'x:1', bogus: true}]}\n",
		"invalid value": "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: bad, namespace: cell-a}\nspec:\n  replicas: 1\n  selector: {matchLabels: {a: b}}\n" +
			"  template:\n    metadata: {labels: {a: c}}\n    spec: {containers: [{name: c, image: 'x:1', ports: [{containerPort: 70000}]}]}\n",
		// And so must the CRDs' schemas.
		"unknown Certificate field": "apiVersion: cert-manager.io/v1\nkind: Certificate\nmetadata: {name: bad, namespace: cellpay-gtr}\n" +
			"spec: {secretName: s, issuerRef: {name: i}, dnsNames: [a], dnsName: [b]}\n",
		"invalid Certificate value": "apiVersion: cert-manager.io/v1\nkind: Certificate\nmetadata: {name: bad, namespace: cellpay-gtr}\n" +
			"spec: {secretName: s, issuerRef: {name: i}, dnsNames: [a], privateKey: {algorithm: DSA}}\n",
		"unknown CertificateRequestPolicy field": "apiVersion: policy.cert-manager.io/v1alpha1\nkind: CertificateRequestPolicy\nmetadata: {name: bad}\n" +
			"spec: {selector: {namespace: {matchNames: [a]}}, allowed: {uri: {values: [x]}}}\n",
		"unknown Cluster field": "apiVersion: postgresql.cnpg.io/v1\nkind: Cluster\nmetadata: {name: bad, namespace: cell-a}\n" +
			"spec: {instances: 3, storage: {size: 1Gi}, instance: 2}\n",
		"unknown PodMonitor field": "apiVersion: monitoring.coreos.com/v1\nkind: PodMonitor\nmetadata: {name: bad, namespace: cell-a}\n" +
			"spec: {selector: {}, podMetricsEndpoints: [{port: metrics, relabels: []}]}\n",
		"invalid PrometheusRule value": "apiVersion: monitoring.coreos.com/v1\nkind: PrometheusRule\nmetadata: {name: bad, namespace: cell-a}\n" +
			"spec: {groups: [{name: g, rules: [{alert: A, expr: up, for: 5 minutes}]}]}\n",
		// A CEL rule of the CRD: preferred durability with standbyNamesPre.
		"invalid Cluster value": "apiVersion: postgresql.cnpg.io/v1\nkind: Cluster\nmetadata: {name: bad, namespace: cell-a}\n" +
			"spec: {instances: 3, storage: {size: 1Gi}, postgresql: {synchronous: {method: any, number: 1, dataDurability: preferred, standbyNamesPre: [x]}}}\n",
	} {
		var u unstructured.Unstructured
		if err := yaml.Unmarshal([]byte(doc), &u.Object); err != nil {
			t.Fatal(err)
		}
		obj := Object{GVK: u.GroupVersionKind(), Namespace: u.GetNamespace(), Name: u.GetName(), YAML: []byte(doc)}
		if err := a.apply(ctx, obj, true); err == nil {
			t.Errorf("%s: the server accepted a bad object", name)
		} else {
			t.Logf("%s: refused as expected: %v", name, err)
		}
	}
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[len(s)-n:]
}
