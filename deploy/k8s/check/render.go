// Package check renders Cellpay's Kubernetes manifests (deploy/k8s) with the
// kustomize library, decodes every object strictly into the Kubernetes API
// types (and cert-manager's, approver-policy's, CloudNativePG's and the
// Prometheus Operator's, see Scheme), and proves properties of the result:
// probes, limits, pinned images, non-root pods, disruption budgets, the
// internal hops' mutual TLS (hoptls.go), who may obtain which certificate
// (issuance.go), NATS's certificate reload (nats_reload.go), each cell's
// database (database.go), the monitoring
// (monitoring.go, its paths scrape.go, its rules rules.go), and the cell
// boundary, the last with a small NetworkPolicy evaluator (netpol.go)
// rather than by reading file names.
//
// It lives in its own module so that kustomize, client-go and the API types
// never enter the main module. It must never need a kustomize binary, a
// cluster or the network for its default tests; the server-side dry run
// against a real kube-apiserver is behind the envtest build tag
// (scripts/k8s-envtest.sh).
package check

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"

	policyv1alpha1 "github.com/cert-manager/approver-policy/pkg/apis/policy/v1alpha1"
	cmv1 "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cnpgv1 "github.com/cloudnative-pg/cloudnative-pg/api/v1"
	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	kjson "k8s.io/apimachinery/pkg/runtime/serializer/json"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/api/types"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"
)

// Root is where the deploy/k8s tree sits in the in-memory filesystem that
// Load builds.
const Root = "/k8s"

// Object is one rendered object: its raw YAML (what a server-side apply
// sends) and its strictly decoded typed form.
type Object struct {
	GVK       schema.GroupVersionKind
	Namespace string
	Name      string
	YAML      []byte
	Typed     runtime.Object
}

func (o Object) String() string {
	if o.Namespace == "" {
		return o.GVK.Kind + "/" + o.Name
	}
	return o.GVK.Kind + " " + o.Namespace + "/" + o.Name
}

// Tree is the deploy/k8s tree in an in-memory filesystem.
type Tree struct{ FS filesys.FileSystem }

// Load copies the deploy/k8s tree at dir (without the check module) into an
// in-memory filesystem, and fills in every secretGenerator input file that is
// missing (the real ones are made by scripts/k8s-secrets.sh and kept out of
// git) with a fixed dummy value, so that rendering needs no secret material.
func Load(dir string) (*Tree, error) {
	mem := filesys.MakeFsInMemory()
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		if d.IsDir() {
			if rel == "check" || rel == "secrets" || strings.HasSuffix(rel, string(filepath.Separator)+"secrets") {
				// The checks themselves, and real secret material: never read.
				return filepath.SkipDir
			}
			return nil
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return mem.WriteFile(path.Join(Root, filepath.ToSlash(rel)), data)
	})
	if err != nil {
		return nil, fmt.Errorf("check: load %s: %w", dir, err)
	}
	t := &Tree{FS: mem}
	return t, t.fillSecrets()
}

// fillSecrets writes a dummy file for each secretGenerator file source.
func (t *Tree) fillSecrets() error {
	return t.FS.Walk(Root, func(p string, info fs.FileInfo, err error) error {
		if err != nil || info.IsDir() || path.Base(p) != "kustomization.yaml" {
			return err
		}
		k, err := t.kustomization(p)
		if err != nil {
			return err
		}
		for _, g := range k.SecretGenerator {
			for _, src := range g.FileSources {
				file := src
				if _, after, ok := strings.Cut(src, "="); ok {
					file = after
				}
				full := path.Join(path.Dir(p), file)
				if !t.FS.Exists(full) {
					if err := t.FS.WriteFile(full, []byte("0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef")); err != nil {
						return err
					}
				}
			}
		}
		return nil
	})
}

func (t *Tree) kustomization(p string) (*types.Kustomization, error) {
	data, err := t.FS.ReadFile(p)
	if err != nil {
		return nil, err
	}
	var k types.Kustomization
	if err := yaml.UnmarshalStrict(data, &k); err != nil {
		return nil, fmt.Errorf("check: %s: %w", p, err)
	}
	return &k, nil
}

// Overlays lists the overlay directories (relative to Root), sorted.
func (t *Tree) Overlays() ([]string, error) {
	var out []string
	err := t.FS.Walk(path.Join(Root, "overlays"), func(p string, info fs.FileInfo, err error) error {
		if err != nil {
			return err
		}
		if !info.IsDir() && path.Base(p) == "kustomization.yaml" {
			out = append(out, strings.TrimPrefix(path.Dir(p), Root+"/"))
		}
		return nil
	})
	sort.Strings(out)
	return out, err
}

// Render runs kustomize on one overlay (relative to Root) and decodes every
// object strictly: an unknown or duplicated field, or a kind Scheme does not
// have, is an error.
func (t *Tree) Render(overlay string) ([]Object, error) {
	opts := krusty.MakeDefaultOptions()
	m, err := krusty.MakeKustomizer(opts).Run(t.FS, path.Join(Root, overlay))
	if err != nil {
		return nil, fmt.Errorf("check: kustomize %s: %w", overlay, err)
	}
	var out []Object
	var errs []error
	for _, r := range m.Resources() {
		data, err := r.AsYAML()
		if err != nil {
			return nil, fmt.Errorf("check: %s: %w", overlay, err)
		}
		o, err := Decode(data)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %s/%s: %w", overlay, r.GetKind(), r.GetName(), err))
			continue
		}
		out = append(out, o)
	}
	return out, errors.Join(errs...)
}

// RenderAll renders every overlay and returns the objects of all of them, as
// one cluster would hold them.
func (t *Tree) RenderAll() ([]Object, error) {
	overlays, err := t.Overlays()
	if err != nil {
		return nil, err
	}
	if len(overlays) == 0 {
		return nil, errors.New("check: no overlays")
	}
	var all []Object
	for _, o := range overlays {
		objs, err := t.Render(o)
		if err != nil {
			return nil, err
		}
		all = append(all, objs...)
	}
	return all, nil
}

// Scheme holds every kind the manifests may use: the built-in Kubernetes
// API types, cert-manager's (cert-manager.io/v1: Certificate, Issuer,
// ClusterIssuer, CertificateRequest), approver-policy's
// (policy.cert-manager.io/v1alpha1: CertificateRequestPolicy), CloudNativePG's
// (postgresql.cnpg.io/v1: Cluster and the rest) and the Prometheus
// Operator's (monitoring.coreos.com/v1: Prometheus, PodMonitor,
// PrometheusRule and the rest). It is this package's own, so that
// client-go's global scheme is never changed. A kind outside it fails
// Decode: add its Go API types here, and its CRDs to the server-side dry
// run (envtest_test.go), before a manifest uses it.
var Scheme = newScheme()

func newScheme() *runtime.Scheme {
	s := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(s))
	utilruntime.Must(cmv1.AddToScheme(s))
	utilruntime.Must(policyv1alpha1.AddToScheme(s))
	utilruntime.Must(cnpgv1.AddToScheme(s))
	utilruntime.Must(monitoringv1.AddToScheme(s))
	return s
}

var strict = kjson.NewSerializerWithOptions(kjson.DefaultMetaFactory, Scheme, Scheme,
	kjson.SerializerOptions{Yaml: true, Strict: true})

// Decode decodes one YAML object strictly into its API type (Scheme).
func Decode(data []byte) (Object, error) {
	var u unstructured.Unstructured
	if err := yaml.Unmarshal(data, &u.Object); err != nil {
		return Object{}, err
	}
	gvk := u.GroupVersionKind()
	if !Scheme.Recognizes(gvk) {
		return Object{}, fmt.Errorf("unknown kind %s", gvk)
	}
	typed, _, err := strict.Decode(data, nil, nil)
	if err != nil {
		return Object{}, err
	}
	ns := u.GetNamespace()
	if ClusterScoped(gvk) {
		// kustomize knows the scope of the built-in kinds only, and
		// stamps an overlay's namespace on a cluster-scoped custom
		// resource too; the API server drops it, and so does Decode.
		ns = ""
		if m, err := meta.Accessor(typed); err == nil {
			m.SetNamespace("")
		}
	}
	return Object{GVK: gvk, Namespace: ns, Name: u.GetName(), YAML: bytes.Clone(data), Typed: typed}, nil
}

// clusterScoped are the cluster-scoped kinds the manifests use.
var clusterScoped = map[schema.GroupKind]bool{
	{Kind: "Namespace"}: true,
	{Group: "rbac.authorization.k8s.io", Kind: "ClusterRole"}:           true,
	{Group: "rbac.authorization.k8s.io", Kind: "ClusterRoleBinding"}:    true,
	{Group: "cert-manager.io", Kind: "ClusterIssuer"}:                   true,
	{Group: "policy.cert-manager.io", Kind: "CertificateRequestPolicy"}: true,
}

// ClusterScoped says whether objects of kind gvk live outside any
// namespace.
func ClusterScoped(gvk schema.GroupVersionKind) bool { return clusterScoped[gvk.GroupKind()] }
