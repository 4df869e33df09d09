package check

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"
)

// Check runs every check over the rendered objects of all overlays and
// returns one line per violation, sorted; none means the manifests hold.
func Check(objs []Object) []string {
	w := NewWorld(objs)
	var v []string
	v = append(v, CheckWorkloads(w)...)
	v = append(v, CheckCells(w)...)
	v = append(v, CheckPlatform(w)...)
	v = append(v, CheckRouting(w)...)
	v = append(v, CheckBoundary(w)...)
	v = append(v, CheckTrust(w)...)
	v = append(v, CheckHopTLS(w)...)
	v = append(v, CheckAccessPoints(w)...)
	v = append(v, CheckMonitoring(w)...)
	v = append(v, CheckScrape(w)...)
	v = append(v, CheckCallbacks(w)...)
	v = append(v, CheckZones(w)...)
	v = append(v, CheckIssuance(w)...)
	v = append(v, CheckNATSReload(w)...)
	sort.Strings(v)
	return v
}

// CheckWorkloads holds every workload to the same bar: pinned images (a tag
// or digest, never latest), CPU and memory requests and limits, non-root
// with a read-only root filesystem and no privilege escalation, no service
// account token, probes on anything that serves a port (gRPC ones for
// Cellpay's own binaries), and a PodDisruptionBudget when replicated.
func CheckWorkloads(w *World) []string {
	var v []string
	for _, o := range w.Objects {
		tmpl, ok := podTemplate(o)
		if !ok {
			continue
		}
		spec := tmpl.Spec
		if spec.AutomountServiceAccountToken == nil || *spec.AutomountServiceAccountToken {
			v = append(v, fmt.Sprintf("%s: automountServiceAccountToken is not false", o))
		}
		podNonRoot := spec.SecurityContext != nil && isTrue(spec.SecurityContext.RunAsNonRoot)
		if spec.SecurityContext != nil && spec.SecurityContext.RunAsUser != nil && *spec.SecurityContext.RunAsUser == 0 {
			podNonRoot = false
		}
		for _, c := range append(append([]corev1.Container{}, spec.InitContainers...), spec.Containers...) {
			v = append(v, checkContainer(o, c, podNonRoot)...)
		}
		if replicas(o) > 1 && !hasPDB(w, o, tmpl.Labels) {
			v = append(v, fmt.Sprintf("%s: %d replicas and no PodDisruptionBudget that lets one go at a time", o, replicas(o)))
		}
	}
	return v
}

func checkContainer(o Object, c corev1.Container, podNonRoot bool) []string {
	var v []string
	at := fmt.Sprintf("%s container %s", o, c.Name)
	if msg := imagePinned(c.Image); msg != "" {
		v = append(v, at+": "+msg)
	}
	for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		if q, ok := c.Resources.Requests[r]; !ok || q.IsZero() {
			v = append(v, fmt.Sprintf("%s: no %s request", at, r))
		}
		if q, ok := c.Resources.Limits[r]; !ok || q.IsZero() {
			v = append(v, fmt.Sprintf("%s: no %s limit", at, r))
		}
	}
	sc := c.SecurityContext
	nonRoot := podNonRoot
	if sc != nil && sc.RunAsNonRoot != nil {
		nonRoot = *sc.RunAsNonRoot
	}
	if sc != nil && sc.RunAsUser != nil && *sc.RunAsUser == 0 {
		nonRoot = false
	}
	if !nonRoot {
		v = append(v, at+": may run as root (runAsNonRoot)")
	}
	if sc == nil || !isTrue(sc.ReadOnlyRootFilesystem) {
		v = append(v, at+": root filesystem is writable (readOnlyRootFilesystem)")
	}
	if sc == nil || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
		v = append(v, at+": allowPrivilegeEscalation is not false")
	}
	if sc == nil || sc.Capabilities == nil || !dropsAll(sc.Capabilities.Drop) {
		v = append(v, at+": capabilities do not drop ALL")
	}
	if len(c.Ports) > 0 {
		if c.ReadinessProbe == nil || c.LivenessProbe == nil {
			v = append(v, at+": serves a port without readiness and liveness probes")
		} else if isNATSMonImage(c.Image) {
			// natsmon serves HTTP alone (/metrics, /healthz): its probes
			// are HTTP, on a port it declares.
			for kind, p := range map[string]*corev1.Probe{"readiness": c.ReadinessProbe, "liveness": c.LivenessProbe} {
				if p.HTTPGet == nil {
					v = append(v, fmt.Sprintf("%s: %s probe is not an HTTP GET", at, kind))
				} else if port := p.HTTPGet.Port; port.StrVal == "" && !declaresPort(c, port.IntVal) || port.StrVal != "" && !declaresPortName(c, port.StrVal) {
					v = append(v, fmt.Sprintf("%s: %s probe port %s is not a container port", at, kind, port.String()))
				}
			}
		} else if strings.HasPrefix(c.Image, "ghcr.io/cellpay/") {
			probes := map[string]*corev1.Probe{"readiness": c.ReadinessProbe, "liveness": c.LivenessProbe}
			if c.StartupProbe != nil {
				probes["startup"] = c.StartupProbe
			}
			for kind, p := range probes {
				if p.GRPC == nil {
					v = append(v, fmt.Sprintf("%s: %s probe is not gRPC health", at, kind))
				} else if !declaresPort(c, p.GRPC.Port) {
					v = append(v, fmt.Sprintf("%s: %s probe port %d is not a container port", at, kind, p.GRPC.Port))
				}
			}
		}
	}
	return v
}

// imagePinned says what is wrong with an image reference, or "".
func imagePinned(image string) string {
	if strings.Contains(image, "@sha256:") {
		return ""
	}
	slash := strings.LastIndex(image, "/")
	colon := strings.LastIndex(image, ":")
	if colon <= slash {
		return fmt.Sprintf("image %q has no tag or digest", image)
	}
	if tag := image[colon+1:]; tag == "latest" || tag == "" {
		return fmt.Sprintf("image %q uses a floating tag", image)
	}
	return ""
}

func isTrue(b *bool) bool { return b != nil && *b }

func dropsAll(caps []corev1.Capability) bool {
	for _, c := range caps {
		if c == "ALL" {
			return true
		}
	}
	return false
}

// NATSMonImage is natsmon's image (cmd/natsmon), the NATS pods' sidecar:
// Cellpay's one image that serves HTTP rather than gRPC.
const NATSMonImage = "ghcr.io/cellpay/natsmon"

func isNATSMonImage(image string) bool {
	name, _, _ := strings.Cut(image, "@")
	if colon := strings.LastIndex(name, ":"); colon > strings.LastIndex(name, "/") {
		name = name[:colon]
	}
	return name == NATSMonImage
}

func declaresPortName(c corev1.Container, name string) bool {
	for _, p := range c.Ports {
		if p.Name == name {
			return true
		}
	}
	return false
}

func declaresPort(c corev1.Container, port int32) bool {
	for _, p := range c.Ports {
		if p.ContainerPort == port {
			return true
		}
	}
	return false
}

func replicas(o Object) int32 {
	var r *int32
	switch t := o.Typed.(type) {
	case *appsv1.Deployment:
		r = t.Spec.Replicas
	case *appsv1.StatefulSet:
		r = t.Spec.Replicas
	default:
		return 0
	}
	if r == nil {
		return 1
	}
	return *r
}

// hasPDB says whether a PodDisruptionBudget in o's namespace selects pods
// labelled l and allows at least one disruption at full strength.
func hasPDB(w *World, o Object, l map[string]string) bool {
	for _, po := range w.Find("PodDisruptionBudget", o.Namespace) {
		pdb := po.Typed.(*policyv1.PodDisruptionBudget)
		sel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
		if err != nil || sel.Empty() || !sel.Matches(labels.Set(l)) {
			continue
		}
		n := int(replicas(o))
		if m := pdb.Spec.MaxUnavailable; m != nil {
			if u, err := intstr.GetScaledValueFromIntOrPercent(m, n, false); err == nil && u >= 1 {
				return true
			}
		}
		if m := pdb.Spec.MinAvailable; m != nil {
			if a, err := intstr.GetScaledValueFromIntOrPercent(m, n, true); err == nil && a < n {
				return true
			}
		}
	}
	return false
}

// CheckCells checks what each cell namespace must hold: the cell
// Deployment (replicated, its ID from the namespace), its own Postgres
// (CheckDatabase), and its Service.
func CheckCells(w *World) []string {
	var v []string
	for _, ns := range w.Cells {
		dep, ok := w.get("Deployment", ns, "cell")
		if !ok {
			v = append(v, ns+": no Deployment cell")
		} else {
			d := dep.Typed.(*appsv1.Deployment)
			if replicas(dep) < 2 {
				v = append(v, fmt.Sprintf("%s: cell has %d replicas, want several", ns, replicas(dep)))
			}
			if id := envValue(d.Spec.Template.Spec, "cell", "CELL_ID"); id != ns && id != "fieldRef:metadata.namespace" {
				v = append(v, fmt.Sprintf("%s: CELL_ID is %q, want the namespace", ns, id))
			}
			v = append(v, natsClient(ns+": cell", d.Spec.Template.Spec, "cell", "CELL_NATS_URL", "CELL_NATS_REPLICAS")...)
		}
		v = append(v, CheckDatabase(w, ns)...)
		if _, ok := w.get("Service", ns, "cell"); !ok {
			v = append(v, ns+": no Service cell")
		}
	}
	return v
}

// CheckPlatform checks the shared parts: a replicated GTR declaring its
// partners' ports (gRPC, REST) and its admin port, with the routing table,
// operators file and partner registry mounted from rendered objects (its
// certificate is CheckTrust's), a three-node NATS with JetStream on
// volumes, and the replicator.
func CheckPlatform(w *World) []string {
	var v []string
	dep, ok := w.get("Deployment", GTRNamespace, "gtr")
	if !ok {
		return []string{"no Deployment gtr in " + GTRNamespace}
	}
	d := dep.Typed.(*appsv1.Deployment)
	if replicas(dep) < 2 {
		v = append(v, fmt.Sprintf("gtr has %d replicas, want several", replicas(dep)))
	}
	for _, p := range []int32{7070, 7060, 7071} {
		if !declaresPort(d.Spec.Template.Spec.Containers[0], p) {
			v = append(v, fmt.Sprintf("gtr does not declare port %d", p))
		}
	}
	v = append(v, natsClient("gtr", d.Spec.Template.Spec, "gtr", "GTR_NATS_URL", "GTR_NATS_REPLICAS")...)
	// Each file the GTR reads is in a rendered object of the right kind.
	// The partner registry holds key hashes and callback signing
	// secrets: a Secret, never a ConfigMap.
	if c, ok := container(d.Spec.Template.Spec, "gtr"); !ok {
		v = append(v, "gtr: no container gtr")
	} else {
		for _, f := range []struct{ env, kind string }{
			{"GTR_CONFIG", "ConfigMap"}, {"GTR_OPERATORS", "Secret"}, {"GTR_PARTNERS", "Secret"},
		} {
			if msg := mountedFile(w, GTRNamespace, d.Spec.Template.Spec, c, f.env, f.kind); msg != "" {
				v = append(v, "gtr: "+msg)
			}
		}
	}
	nats, ok := w.get("StatefulSet", "cellpay-nats", "nats")
	if !ok {
		v = append(v, "no StatefulSet nats")
	} else if replicas(nats) != 3 || len(nats.Typed.(*appsv1.StatefulSet).Spec.VolumeClaimTemplates) == 0 {
		v = append(v, "nats is not three nodes on volumes")
	}
	jetstream := false
	for _, o := range w.Find("ConfigMap", "cellpay-nats") {
		if strings.Contains(o.Typed.(*corev1.ConfigMap).Data["nats.conf"], "jetstream {") {
			jetstream = true
		}
	}
	if !jetstream {
		v = append(v, "nats.conf does not enable JetStream")
	}
	if rep, ok := w.get("Deployment", "cellpay-nats", "replicator"); !ok {
		v = append(v, "no Deployment replicator")
	} else {
		v = append(v, natsClient("replicator", rep.Typed.(*appsv1.Deployment).Spec.Template.Spec, "replicator", "REPLICATOR_NATS_URL", "REPLICATOR_REPLICAS")...)
	}
	return v
}

// natsServers is how many servers the NATS StatefulSet runs, and so how
// many a client lists and how many replicas what it creates gets.
const natsServers = 3

// natsClient checks a NATS client's container: its URL lists every NATS
// server (so that it reaches another when the one it uses is lost), and
// what it creates in NATS gets a replica on each.
func natsClient(who string, spec corev1.PodSpec, container, urlEnv, replicasEnv string) []string {
	var v []string
	url := envValue(spec, container, urlEnv)
	if n := len(strings.Split(url, ",")); url == "" || n != natsServers {
		v = append(v, fmt.Sprintf("%s: %s lists %d NATS servers (%q), want all %d", who, urlEnv, n, url, natsServers))
	}
	if r := envValue(spec, container, replicasEnv); r != strconv.Itoa(natsServers) {
		v = append(v, fmt.Sprintf("%s: %s is %q, want %d (a replica on every NATS server)", who, replicasEnv, r, natsServers))
	}
	return v
}

// RoutingTable is the part of the GTR's routing file the checks read.
type RoutingTable struct {
	Version int `json:"version"`
	Cells   []struct {
		ID   string `json:"id"`
		Addr string `json:"addr"`
	} `json:"cells"`
}

// CheckRouting checks that the GTR's routing table and the cell namespaces
// agree: every cell has exactly one line, at its in-cluster address, and
// every line has a cell.
func CheckRouting(w *World) []string {
	dep, ok := w.get("Deployment", GTRNamespace, "gtr")
	if !ok {
		return nil // reported by CheckPlatform
	}
	var table *RoutingTable
	for _, vol := range dep.Typed.(*appsv1.Deployment).Spec.Template.Spec.Volumes {
		if vol.ConfigMap == nil {
			continue
		}
		if o, ok := w.get("ConfigMap", GTRNamespace, vol.ConfigMap.Name); ok {
			if data, ok := o.Typed.(*corev1.ConfigMap).Data["gtr.yaml"]; ok {
				table = new(RoutingTable)
				if err := yaml.Unmarshal([]byte(data), table); err != nil {
					return []string{"gtr.yaml: " + err.Error()}
				}
			}
		}
	}
	if table == nil {
		return []string{"the GTR mounts no ConfigMap with gtr.yaml"}
	}
	var v []string
	listed := map[string]int{}
	for _, c := range table.Cells {
		listed[c.ID]++
		if want := CellAddr(c.ID); c.Addr != want {
			v = append(v, fmt.Sprintf("gtr.yaml: %s has addr %q, want %q", c.ID, c.Addr, want))
		}
		if !w.isCell(c.ID) {
			v = append(v, fmt.Sprintf("gtr.yaml: %s has no cell namespace (overlay)", c.ID))
		}
	}
	for _, ns := range w.Cells {
		if listed[ns] != 1 {
			v = append(v, fmt.Sprintf("gtr.yaml: cell %s is listed %d times, want once", ns, listed[ns]))
		}
	}
	return v
}

// CellAddr is the address the GTR dials for a cell: every ready pod of the
// cell's headless Service.
func CellAddr(id string) string { return "dns:///cell." + id + ".svc.cluster.local:7081" }

func (w *World) get(kind, ns, name string) (Object, bool) {
	for _, o := range w.Objects {
		if o.GVK.Kind == kind && o.Namespace == ns && o.Name == name {
			return o, true
		}
	}
	return Object{}, false
}

// envValue returns a container's env value, or "fieldRef:PATH".
func envValue(spec corev1.PodSpec, container, name string) string {
	for _, c := range spec.Containers {
		if c.Name != container {
			continue
		}
		for _, e := range c.Env {
			if e.Name != name {
				continue
			}
			if e.ValueFrom != nil && e.ValueFrom.FieldRef != nil {
				return "fieldRef:" + e.ValueFrom.FieldRef.FieldPath
			}
			if e.ValueFrom != nil {
				return "valueFrom"
			}
			return e.Value
		}
	}
	return ""
}
