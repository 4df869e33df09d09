package check

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"
)

// deployDir is the deploy/k8s tree this module sits in.
const deployDir = ".."

func loadTree(t *testing.T, dir string) *Tree {
	t.Helper()
	tree, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	return tree
}

func renderAll(t *testing.T, dir string) []Object {
	t.Helper()
	objs, err := loadTree(t, dir).RenderAll()
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

// TestOverlaysRender renders every overlay on its own and decodes every
// object strictly, and checks each overlay holds what it should.
func TestOverlaysRender(t *testing.T) {
	tree := loadTree(t, deployDir)
	overlays, err := tree.Overlays()
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"overlays/cell-a", "overlays/cell-b", "overlays/cell-c", "overlays/platform"}
	for _, w := range want {
		if !contains(overlays, w) {
			t.Errorf("overlay %s missing; have %v", w, overlays)
		}
	}
	for _, o := range overlays {
		t.Run(strings.TrimPrefix(o, "overlays/"), func(t *testing.T) {
			objs, err := tree.Render(o)
			if err != nil {
				t.Fatal(err)
			}
			kinds := map[string]int{}
			for _, obj := range objs {
				kinds[obj.GVK.Kind]++
				if !ClusterScoped(obj.GVK) && obj.Namespace == "" {
					t.Errorf("%s has no namespace", obj)
				}
			}
			min := map[string]int{"Namespace": 1, "Deployment": 1, "Service": 2, "NetworkPolicy": 2}
			if strings.HasPrefix(o, "overlays/cell-") {
				min["Cluster"], min["Certificate"], min["Secret"], min["PodDisruptionBudget"], min["Service"] = 1, 1, 3, 1, 1
			}
			// A cell's: its pods and its Postgres; the platform's: the GTR
			// and cert-manager.
			min["Prometheus"], min["PodMonitor"], min["PrometheusRule"] = 1, 2, 1
			for k, n := range min {
				if kinds[k] < n {
					t.Errorf("%d %s, want at least %d (have %v)", kinds[k], k, n, kinds)
				}
			}
		})
	}
}

// TestStrictDecodingRejectsUnknownFields proves the decoder is strict: the
// render test would pass vacuously otherwise.
func TestStrictDecodingRejectsUnknownFields(t *testing.T) {
	for name, doc := range map[string]string{
		"unknown field": "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: x}\nspec: {replicas: 1, replica: 2}\n",
		"misplaced":     "apiVersion: v1\nkind: Service\nmetadata: {name: x}\nspec: {ports: [{port: 1, containerPort: 2}]}\n",
		"duplicate":     "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\ndata: {a: b}\ndata: {c: d}\n",
		"unknown kind":  "apiVersion: v1\nkind: Deploymnet\nmetadata: {name: x}\n",
		// cert-manager's kinds are decoded as strictly as the built-in ones.
		"unknown Certificate field": "apiVersion: cert-manager.io/v1\nkind: Certificate\nmetadata: {name: x}\n" +
			"spec: {secretName: s, issuerRef: {name: i}, dnsName: [a]}\n",
		"misplaced Issuer field":    "apiVersion: cert-manager.io/v1\nkind: Issuer\nmetadata: {name: x}\nspec: {ca: {secretName: s, selfSigned: {}}}\n",
		"unknown cert-manager kind": "apiVersion: cert-manager.io/v1\nkind: Certficate\nmetadata: {name: x}\n",
	} {
		if _, err := Decode([]byte(doc)); err == nil {
			t.Errorf("%s: decoded without error", name)
		}
	}
	for _, doc := range []string{
		"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\ndata: {a: b}\n",
		"apiVersion: cert-manager.io/v1\nkind: Certificate\nmetadata: {name: x}\nspec: {secretName: s, issuerRef: {name: i}, dnsNames: [a]}\n",
		"apiVersion: cert-manager.io/v1\nkind: ClusterIssuer\nmetadata: {name: x}\nspec: {selfSigned: {}}\n",
	} {
		if _, err := Decode([]byte(doc)); err != nil {
			t.Errorf("a valid object: %v\n%s", err, doc)
		}
	}
}

// TestManifestsHold runs every property check over all overlays together.
func TestManifestsHold(t *testing.T) {
	objs := renderAll(t, deployDir)
	for _, v := range Check(objs) {
		t.Error(v)
	}
	w := NewWorld(objs)
	for _, c := range []string{"cell-a", "cell-b", "cell-c"} {
		if !w.isCell(c) {
			t.Errorf("no cell namespace %s; have %v", c, w.Cells)
		}
	}
}

// TestCommittedOverlaysAreGenerated holds the committed cell overlays to the
// generator's output, so that a generated cell is what the others are.
func TestCommittedOverlaysAreGenerated(t *testing.T) {
	for _, c := range []string{"cell-a", "cell-b", "cell-c"} {
		files, err := OverlayFiles(c)
		if err != nil {
			t.Fatal(err)
		}
		for name, want := range files {
			got, err := os.ReadFile(filepath.Join(deployDir, "overlays", c, name))
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != string(want) {
				t.Errorf("overlays/%s/%s differs from the generator's output; regenerate it", c, name)
			}
		}
	}
}

// newCellName is the cell the tests generate; no real cell should take it.
const newCellName = "cell-new"

// TestNewCell generates one more cell into a copy of the tree and runs the
// same checks over the result.
func TestNewCell(t *testing.T) {
	dir := t.TempDir()
	if err := os.CopyFS(dir, os.DirFS(deployDir)); err != nil {
		t.Fatal(err)
	}
	if err := NewCell(dir, newCellName); err != nil {
		t.Fatal(err)
	}
	if err := NewCell(dir, newCellName); err == nil {
		t.Error("adding a cell twice: no error")
	}
	if err := NewCell(dir, "Cell_E"); err == nil {
		t.Error("a name that is no DNS label: no error")
	}
	objs := renderAll(t, dir)
	for _, v := range Check(objs) {
		t.Error(v)
	}
	if before := NewWorld(renderAll(t, deployDir)).Cells; !contains(NewWorld(objs).Cells, newCellName) ||
		len(NewWorld(objs).Cells) != len(before)+1 {
		t.Errorf("cells %v, want %v and %s", NewWorld(objs).Cells, before, newCellName)
	}
	// Exactly one line of GTR configuration changed, besides the version.
	before, _ := os.ReadFile(filepath.Join(deployDir, "overlays/platform/gtr.yaml"))
	after, _ := os.ReadFile(filepath.Join(dir, "overlays/platform/gtr.yaml"))
	added := diffLines(string(before), string(after))
	if len(added) != 2 || !strings.HasPrefix(added[0], "version: ") || added[1] != RoutingLine(newCellName) {
		t.Errorf("routing table change: %q, want the version and one cell line", added)
	}
	var before1, after1 RoutingTable
	if err := yaml.Unmarshal(before, &before1); err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(after, &after1); err != nil {
		t.Fatal(err)
	}
	if after1.Version != before1.Version+1 {
		t.Errorf("version %d -> %d, want +1", before1.Version, after1.Version)
	}
}

// diffLines returns the lines of b not in a.
func diffLines(a, b string) []string {
	have := map[string]bool{}
	for _, l := range strings.Split(a, "\n") {
		have[l] = true
	}
	var out []string
	for _, l := range strings.Split(b, "\n") {
		if !have[l] {
			out = append(out, l)
		}
	}
	return out
}

func contains(s []string, x string) bool {
	for _, e := range s {
		if e == x {
			return true
		}
	}
	return false
}

// policy decodes a NetworkPolicy written as YAML.
func policy(t *testing.T, ns, doc string) Object {
	t.Helper()
	o, err := Decode([]byte("apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\n" + doc))
	if err != nil {
		t.Fatal(err)
	}
	p := o.Typed.(*networkingv1.NetworkPolicy)
	p.Namespace, o.Namespace = ns, ns
	return o
}

// TestDockerfile holds the image build to its rules: every base image pinned
// by exact version tag or digest (never latest), static binaries
// (CGO_ENABLED=0), and run images FROM scratch, so no shell at run time.
func TestDockerfile(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(deployDir, "..", "..", "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	text := string(data)
	args := map[string]string{}
	stages := map[string]bool{}
	pinned := regexp.MustCompile(`^[a-z0-9./-]+(:[0-9]+\.[0-9]+\.[0-9]+[a-z0-9.-]*|@sha256:[0-9a-f]{64})$`)
	runtimeStages := 0
	for _, line := range strings.Split(text, "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		switch strings.ToUpper(f[0]) {
		case "ARG":
			if k, v, ok := strings.Cut(f[1], "="); ok {
				args[k] = v
			}
		case "FROM":
			image := os.Expand(f[1], func(k string) string { return args[k] })
			switch {
			case image == "scratch" || stages[image]:
				runtimeStages++
			case !pinned.MatchString(image):
				t.Errorf("FROM %s: not pinned by exact version tag or digest", image)
			}
			if len(f) == 4 && strings.EqualFold(f[2], "AS") {
				stages[f[3]] = true
			}
		}
	}
	for _, target := range []string{"gtr", "cell", "issuersim", "replicator", "gtrctl"} {
		if !stages[target] {
			t.Errorf("no build target %s", target)
		}
	}
	if runtimeStages < 5 {
		t.Errorf("%d stages FROM scratch or an earlier stage, want one per binary", runtimeStages)
	}
	if !strings.Contains(text, "CGO_ENABLED=0") {
		t.Error("the build does not set CGO_ENABLED=0: binaries may not be static")
	}
	if strings.Contains(text, ":latest") {
		t.Error("Dockerfile names a latest tag")
	}
	// The image references the manifests use must be the targets built here.
	objs := renderAll(t, deployDir)
	for _, o := range objs {
		tmpl, ok := podTemplate(o)
		if !ok {
			continue
		}
		for _, c := range tmpl.Spec.Containers {
			if name, ok := strings.CutPrefix(c.Image, "ghcr.io/cellpay/"); ok {
				if name, _, _ = strings.Cut(name, ":"); !stages[name] {
					t.Errorf("%s uses %s, which the Dockerfile does not build", o, c.Image)
				}
			}
		}
	}
}

// TestWorkloadChecksCatch breaks the cell Deployment in the ways the checks
// exist for, and expects each to be reported.
func TestWorkloadChecksCatch(t *testing.T) {
	objs := renderAll(t, deployDir)
	for i, o := range objs {
		d, ok := o.Typed.(*appsv1.Deployment)
		if !ok || o.Namespace != "cell-a" || o.Name != "cell" {
			continue
		}
		d = d.DeepCopy()
		c := &d.Spec.Template.Spec.Containers[0]
		c.Image = "ghcr.io/cellpay/cell:latest"
		c.ReadinessProbe = nil
		c.LivenessProbe.GRPC, c.LivenessProbe.TCPSocket = nil, &corev1.TCPSocketAction{Port: intstr.FromInt32(7081)}
		delete(c.Resources.Limits, corev1.ResourceMemory)
		c.SecurityContext.ReadOnlyRootFilesystem = new(false)
		d.Spec.Template.Spec.SecurityContext.RunAsNonRoot = nil
		for j, e := range c.Env {
			switch e.Name {
			case "CELL_NATS_URL":
				c.Env[j].Value = "tls://nats.cellpay-nats.svc.cluster.local:4222"
			case "CELL_NATS_REPLICAS":
				c.Env[j].Value = "1"
			}
		}
		objs[i].Typed = d
	}
	var pdbless []Object
	for _, o := range objs {
		if !(o.GVK.Kind == "PodDisruptionBudget" && o.Namespace == "cell-b") {
			pdbless = append(pdbless, o)
		}
	}
	got := strings.Join(Check(pdbless), "\n")
	for _, want := range []string{
		`Deployment cell-a/cell container cell: image "ghcr.io/cellpay/cell:latest" uses a floating tag`,
		"Deployment cell-a/cell container cell: serves a port without readiness and liveness probes",
		"Deployment cell-a/cell container cell: no memory limit",
		"Deployment cell-a/cell container cell: root filesystem is writable",
		"Deployment cell-a/cell container cell: may run as root",
		"Deployment cell-b/cell: 3 replicas and no PodDisruptionBudget",
		`cell-a: cell: CELL_NATS_URL lists 1 NATS servers ("tls://nats.cellpay-nats.svc.cluster.local:4222"), want all 3`,
		`cell-a: cell: CELL_NATS_REPLICAS is "1", want 3 (a replica on every NATS server)`,
	} {
		if !strings.Contains(got, want) {
			t.Errorf("no violation %q; got:\n%s", want, got)
		}
	}
}

// brokenCase is the rendered platform broken one way, and the violations
// the checks must report for it.
type brokenCase struct {
	name  string
	objs  []Object
	wants []string
}

// checkBroken runs the checks over each case, each a subtest, requiring
// every violation it wants.
func checkBroken(t *testing.T, cases []brokenCase) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := strings.Join(Check(c.objs), "\n")
			for _, want := range c.wants {
				if !strings.Contains(got, want) {
					t.Errorf("no violation %q; got:\n%s", want, got)
				}
			}
		})
	}
}
