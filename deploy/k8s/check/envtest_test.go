//go:build envtest

// The server-side dry run: every overlay applied with dryRun=All and strict
// field validation against a real kube-apiserver and etcd, with
// cert-manager's CRDs installed (certManagerCRDs). It runs only from
// scripts/k8s-envtest.sh, which builds and caches the binaries and sets
// CELLPAY_ENVTEST=1, CELLPAY_KUBE_APISERVER and CELLPAY_ETCD. Under the tag
// but without them it fails rather than skips, so that a CI step can never
// pass without having talked to a server.

package check

import (
	"bytes"
	"context"
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

// certManagerModule ships the CRDs of the cert-manager kinds the manifests
// use. It is the module whose Go API types Scheme decodes with (go.mod), so
// that the client-side and the server-side checks are of one version.
const certManagerModule = "github.com/cert-manager/cert-manager"

// certManagerCRDFiles are the CRDs installed, from the module's deploy/crds
// (plain controller-gen output; cert-manager's own install bundles them
// the same way). Installing is all cert-manager needs here: no controller
// runs, so nothing is issued, and a dry run only validates.
var certManagerCRDFiles = []string{
	"cert-manager.io_certificates.yaml",
	"cert-manager.io_certificaterequests.yaml",
	"cert-manager.io_issuers.yaml",
	"cert-manager.io_clusterissuers.yaml",
}

// certManagerCRDs finds the CRD files in the module cache: `go list -m`
// from this module names the directory of the version go.mod requires,
// which building this test has downloaded. Nothing is copied into the repo.
func certManagerCRDs(t *testing.T) []string {
	t.Helper()
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", certManagerModule).Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			err = errors.New(strings.TrimSpace(string(ee.Stderr)))
		}
		t.Fatalf("locate %s's CRDs: go list -m %s: %v", certManagerModule, certManagerModule, err)
	}
	dir := strings.TrimSpace(string(out))
	if dir == "" {
		t.Fatalf("locate %s's CRDs: the module is not in the module cache (go mod download %s)", certManagerModule, certManagerModule)
	}
	var paths []string
	for _, f := range certManagerCRDFiles {
		p := filepath.Join(dir, "deploy", "crds", f)
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("locate %s's CRDs: %v", certManagerModule, err)
		}
		paths = append(paths, p)
	}
	return paths
}

func TestServerDryRun(t *testing.T) {
	apiserver, etcd := os.Getenv("CELLPAY_KUBE_APISERVER"), os.Getenv("CELLPAY_ETCD")
	if os.Getenv("CELLPAY_ENVTEST") != "1" || apiserver == "" || etcd == "" {
		t.Fatal("the server-side dry run needs CELLPAY_ENVTEST=1, CELLPAY_KUBE_APISERVER and CELLPAY_ETCD: run scripts/k8s-envtest.sh")
	}
	out := &syncBuffer{}
	crds := certManagerCRDs(t)
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
	t.Logf("kube-apiserver %s up in %s, with %d CRDs from %s", v.GitVersion, time.Since(start).Round(time.Millisecond),
		len(env.CRDs), filepath.Dir(crds[0]))
	if len(env.CRDs) != len(certManagerCRDFiles) {
		t.Fatalf("%d CRDs installed, want %d (%v)", len(env.CRDs), len(certManagerCRDFiles), certManagerCRDFiles)
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
	if kinds["cert-manager.io/Certificate"] == 0 || kinds["cert-manager.io/Issuer"] == 0 {
		t.Errorf("no Certificate or Issuer accepted: the cert-manager objects did not meet the server")
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
