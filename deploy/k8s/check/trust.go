package check

import (
	"cmp"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"

	cmv1 "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
)

// The GTR as the manifests run it.
const (
	GTRImage = "ghcr.io/cellpay/gtr"
	// AdminClientLabel marks a pod of the GTR's namespace that may reach
	// the admin port (policy admin-client-egress).
	AdminClientLabel = "cellpay.io/admin-client"
	// gtrService is the partners' Service, the names the GTR's
	// certificate must carry.
	gtrService = "gtr"
	// gtrAdminService is the admin API's Service, the names the admin
	// listener's certificate must carry.
	gtrAdminService = "gtr-admin"
)

// gtrPartnerListeners are the GTR's partners' listeners: the Payments API
// over gRPC (GTR_LISTEN) and as REST/JSON over HTTPS (GTR_REST_LISTEN),
// both TLS only with the partners' certificate (GTR_TLS_CERT). Each is a
// port of both access points' Services, and partners reach each from
// anywhere; unset, the one is loopback and the other off.
var gtrPartnerListeners = []struct {
	env, what string
	port      int32
}{{"GTR_LISTEN", "gRPC", 7070}, {"GTR_REST_LISTEN", "REST/JSON", 7060}}

// isGTRPartnerPort says whether t is one of the GTR's partners' ports.
func isGTRPartnerPort(t Target) bool {
	for _, l := range gtrPartnerListeners {
		if t == (Target{l.port, corev1.ProtocolTCP}) {
			return true
		}
	}
	return false
}

// CheckTrust checks the GTR's side of the trust boundary:
//
//   - no GTR container, in any object of any overlay, enables gRPC
//     reflection on the partners' listener (GTR_REFLECTION, -reflection);
//   - every GTR container serves both partners' listeners, gRPC on 7070
//     and REST/JSON on 7060, on an address others can reach;
//   - every GTR container throttles failed admin logins from loopback
//     (GTR_ADMIN_THROTTLE_LOOPBACK set to true, no flag turning it off):
//     kubectl port-forward arrives from loopback;
//   - the GTR's probes ask its plaintext health port (GTR_HEALTH_LISTEN),
//     never the partners' (gRPC or REST) or the admin port, which serve
//     TLS only and which kubelet's gRPC probes cannot speak to;
//   - GTR_TLS_CERT and GTR_TLS_KEY, the certificate of both partners'
//     listeners, are tls.crt and tls.key of one Secret that a rendered
//     Certificate issues, mounted whole (a subPath mount never sees a
//     renewal), for the partners' Service's names;
//   - every Certificate's Issuer, and every CA Issuer's Secret, is rendered;
//   - partners reach the GTR's partners' ports, admin clients of its
//     namespace its admin port, and nobody anything else.
func CheckTrust(w *World) []string {
	var v []string
	for _, o := range w.Objects {
		tmpl, ok := podTemplate(o)
		if !ok {
			continue
		}
		for _, c := range append(append([]corev1.Container{}, tmpl.Spec.InitContainers...), tmpl.Spec.Containers...) {
			if !isGTRImage(c.Image) {
				continue
			}
			at := fmt.Sprintf("%s container %s", o, c.Name)
			for _, why := range reflectionOn(w, o.Namespace, c) {
				v = append(v, at+": gRPC reflection on the partners' listener: "+why+"; production leaves it off")
			}
			v = append(v, gtrPartners(at, c)...)
			v = append(v, gtrProbes(at, c)...)
			v = append(v, loopbackThrottled(at, c)...)
		}
	}
	v = append(v, gtrTLS(w)...)
	v = append(v, certificates(w)...)
	v = append(v, gtrIngress(w)...)
	return v
}

// isGTRImage says whether image is the GTR's, at any tag or digest.
func isGTRImage(image string) bool {
	name, _, _ := strings.Cut(image, "@")
	if colon := strings.LastIndex(name, ":"); colon > strings.LastIndex(name, "/") {
		name = name[:colon]
	}
	return name == GTRImage
}

// reflectionOn says why c would serve reflection, if it would. The GTR
// reads GTR_REFLECTION=1 as on; any value but empty or 0 is refused, so
// that a wider reading later cannot slip through, and so is a value the
// rendered objects cannot show (valueFrom, envFrom of an object not
// rendered). A -reflection flag that parses as true is refused as well.
func reflectionOn(w *World, ns string, c corev1.Container) []string {
	const name = "GTR_REFLECTION"
	var v []string
	val, src, known := "", "", true
	for _, ef := range c.EnvFrom {
		var data map[string]string
		var what string
		switch {
		case ef.ConfigMapRef != nil:
			what = "ConfigMap " + ef.ConfigMapRef.Name
			if o, ok := w.get("ConfigMap", ns, ef.ConfigMapRef.Name); ok {
				data = o.Typed.(*corev1.ConfigMap).Data
			}
		case ef.SecretRef != nil:
			what = "Secret " + ef.SecretRef.Name
			if o, ok := w.get("Secret", ns, ef.SecretRef.Name); ok {
				data = secretData(o.Typed.(*corev1.Secret))
			}
		}
		if data == nil {
			val, src, known = "", "envFrom "+what+", which is not rendered", false
			continue
		}
		if x, ok := data[ef.Prefix+name]; ok {
			val, src, known = x, "envFrom "+what, true
		}
	}
	for _, e := range c.Env { // env wins over envFrom, a later entry over an earlier one
		if e.Name != name {
			continue
		}
		if e.ValueFrom != nil {
			val, src, known = "", "env "+name+" from valueFrom", false
		} else {
			val, src, known = e.Value, "env", true
		}
	}
	switch {
	case !known:
		v = append(v, name+" may be set: "+src)
	case val != "" && val != "0":
		v = append(v, fmt.Sprintf("%s=%s from %s", name, val, src))
	}
	for _, arg := range append(append([]string{}, c.Command...), c.Args...) {
		flag, ok := strings.CutPrefix(arg, "--")
		if !ok {
			flag, ok = strings.CutPrefix(arg, "-")
		}
		if !ok {
			continue
		}
		if flag == "reflection" {
			v = append(v, "flag "+arg)
		} else if x, ok := strings.CutPrefix(flag, "reflection="); ok {
			if on, err := strconv.ParseBool(x); on || err != nil {
				v = append(v, "flag "+arg)
			}
		}
	}
	return v
}

// loopbackThrottled holds a GTR container to throttling failed admin
// logins from loopback, said explicitly (GTR_ADMIN_THROTTLE_LOOPBACK=true),
// so that a changed default cannot slip through: in a pod, loopback is
// where kubectl port-forward arrives from, on behalf of whoever the
// cluster lets forward.
func loopbackThrottled(at string, c corev1.Container) []string {
	const name = "GTR_ADMIN_THROTTLE_LOOPBACK"
	var v []string
	val, ok := "", false
	for _, e := range c.Env { // a later entry wins
		if e.Name == name {
			val, ok = e.Value, e.ValueFrom == nil
		}
	}
	if on, err := strconv.ParseBool(val); !ok || err != nil || !on {
		v = append(v, fmt.Sprintf("%s: %s is %q, want \"true\": kubectl port-forward arrives from loopback, whose failed admin logins must be throttled as any address's", at, name, val))
	}
	for _, arg := range slices.Concat(c.Command, c.Args) {
		flag, x, _ := strings.Cut(strings.TrimLeft(arg, "-"), "=")
		if flag != "admin-throttle-loopback" {
			continue
		}
		if on, err := strconv.ParseBool(cmp.Or(x, "true")); err != nil || !on {
			v = append(v, fmt.Sprintf("%s: flag %s: failed admin logins from loopback (kubectl port-forward) not throttled", at, arg))
		}
	}
	return v
}

// gtrPartners holds a GTR container's partners' listeners to the ports
// that the Services expose and gtr-ingress opens to partners: each set, on
// an address others can reach, at its port.
func gtrPartners(at string, c corev1.Container) []string {
	var v []string
	for _, l := range gtrPartnerListeners {
		addr := envOf(c, l.env)
		port, err := listenPort(addr)
		switch {
		case addr == "" && l.env == "GTR_REST_LISTEN":
			v = append(v, fmt.Sprintf("%s: %s is not set: partners get no %s on %d", at, l.env, l.what, l.port))
		case err != nil:
			v = append(v, fmt.Sprintf("%s: %s: %v: partners cannot reach the %s listener", at, l.env, err, l.what))
		case port != l.port:
			v = append(v, fmt.Sprintf("%s: %s is %q, want port %d, the partners' %s port of the Services and policies", at, l.env, addr, l.port, l.what))
		}
	}
	return v
}

// gtrProbes holds every probe of a GTR container to the health port, the
// one that serves plaintext gRPC health.
func gtrProbes(at string, c corev1.Container) []string {
	var v []string
	if _, err := listenPort(envOf(c, "GTR_ADMIN_LISTEN")); err != nil {
		v = append(v, at+": GTR_ADMIN_LISTEN: "+err.Error()+": admin clients of the namespace cannot reach it")
	}
	health, err := listenPort(envOf(c, "GTR_HEALTH_LISTEN"))
	if err != nil {
		return append(v, at+": GTR_HEALTH_LISTEN: "+err.Error()+": kubelet's probes need the plaintext health listener")
	}
	partners, _ := listenPort(envOf(c, "GTR_LISTEN"))
	rest, _ := listenPort(envOf(c, "GTR_REST_LISTEN"))
	admin, _ := listenPort(envOf(c, "GTR_ADMIN_LISTEN"))
	for _, p := range []struct {
		kind  string
		probe *corev1.Probe
	}{{"startup", c.StartupProbe}, {"readiness", c.ReadinessProbe}, {"liveness", c.LivenessProbe}} {
		// A missing or non-gRPC probe is CheckWorkloads' to report.
		if p.probe == nil || p.probe.GRPC == nil {
			continue
		}
		switch port := p.probe.GRPC.Port; {
		case port == partners || port == rest || port == admin:
			v = append(v, fmt.Sprintf("%s: %s probe asks port %d, a TLS listener (partners' or admin), which kubelet's gRPC probes cannot speak to; probe the health port %d",
				at, p.kind, port, health))
		case port != health:
			v = append(v, fmt.Sprintf("%s: %s probe asks port %d, want the health port %d", at, p.kind, port, health))
		}
	}
	return v
}

// listenPort is the port of a listen address that others can reach.
func listenPort(addr string) (int32, error) {
	if addr == "" {
		return 0, fmt.Errorf("not set (the default is loopback)")
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return 0, err
	}
	if ip := net.ParseIP(host); host == "localhost" || ip != nil && ip.IsLoopback() {
		return 0, fmt.Errorf("%q is loopback", addr)
	}
	n, err := strconv.ParseInt(port, 10, 32)
	if err != nil {
		return 0, fmt.Errorf("%q: bad port", addr)
	}
	return int32(n), nil
}

// gtrTLS checks the GTR's certificate wiring: its files come from a Secret
// that a rendered Certificate issues, mounted whole, for the partners'
// Service's names.
func gtrTLS(w *World) []string {
	dep, ok := w.get("Deployment", GTRNamespace, "gtr")
	if !ok {
		return nil // reported by CheckPlatform
	}
	spec := dep.Typed.(*appsv1.Deployment).Spec.Template.Spec
	c, ok := container(spec, "gtr")
	if !ok {
		return []string{"gtr: no container gtr"}
	}
	var v []string
	var secret string
	for _, f := range []struct{ env, key string }{{"GTR_TLS_CERT", "tls.crt"}, {"GTR_TLS_KEY", "tls.key"}} {
		file := envOf(c, f.env)
		if file == "" {
			v = append(v, "gtr has no "+f.env+": the partners' listener serves TLS only")
			continue
		}
		src, ok := resolveFile(spec, c, file)
		switch {
		case !ok:
			v = append(v, fmt.Sprintf("gtr: %s %s is in no volume mount", f.env, file))
			continue
		case src.Volume.Secret == nil:
			v = append(v, fmt.Sprintf("gtr: %s %s is not in a Secret volume", f.env, file))
			continue
		case src.Mount.SubPath != "" || src.Mount.SubPathExpr != "":
			v = append(v, fmt.Sprintf("gtr: %s is mounted with subPath: kubelet never updates it, so a renewed certificate is not seen; mount the Secret as a directory", f.env))
		case src.Key != f.key:
			v = append(v, fmt.Sprintf("gtr: %s is key %s of its Secret, want %s (what cert-manager writes)", f.env, src.Key, f.key))
		}
		if secret != "" && src.Volume.Secret.SecretName != secret {
			v = append(v, "gtr: GTR_TLS_CERT and GTR_TLS_KEY come from different Secrets")
		}
		secret = src.Volume.Secret.SecretName
	}
	if secret == "" {
		return v
	}
	cert, ok := issuedBy(w, GTRNamespace, secret)
	if !ok {
		return append(v, fmt.Sprintf("gtr: TLS Secret %s is issued by no rendered Certificate in %s", secret, GTRNamespace))
	}
	cs := cert.Typed.(*cmv1.Certificate).Spec
	for _, name := range serviceNames(gtrService, GTRNamespace) {
		if !slices.Contains(cs.DNSNames, name) {
			v = append(v, fmt.Sprintf("%s: dnsNames lack %s, a name of the partners' Service", cert, name))
		}
	}
	if cs.IsCA {
		v = append(v, fmt.Sprintf("%s: the GTR's serving certificate is a CA (isCA)", cert))
	}
	if len(cs.Usages) > 0 && !slices.Contains(cs.Usages, cmv1.UsageServerAuth) {
		v = append(v, fmt.Sprintf("%s: usages lack server auth", cert))
	}
	return v
}

// certificates checks the issuance chain: every Certificate's Issuer
// (kind Issuer of cert-manager.io) is rendered in its namespace, every CA
// Issuer's Secret is rendered or issued by a rendered CA Certificate, and
// every rendered CA ClusterIssuer's by one in cert-manager's namespace. A
// ClusterIssuer these manifests do not render, or an external issuer's
// kind, is the cluster's, and is taken as given.
func certificates(w *World) []string {
	var v []string
	for _, o := range w.Find("Certificate", "") {
		ref := o.Typed.(*cmv1.Certificate).Spec.IssuerRef
		if (ref.Group == "" || ref.Group == "cert-manager.io") && (ref.Kind == "" || ref.Kind == cmv1.IssuerKind) {
			if _, ok := w.get(cmv1.IssuerKind, o.Namespace, ref.Name); !ok {
				v = append(v, fmt.Sprintf("%s: Issuer %s is not rendered in %s", o, ref.Name, o.Namespace))
			}
		}
	}
	// A rendered ClusterIssuer's CA Secret is in cert-manager's cluster
	// resource namespace.
	for _, o := range w.Find(cmv1.ClusterIssuerKind, "") {
		ca := o.Typed.(*cmv1.ClusterIssuer).Spec.CA
		if ca == nil {
			continue
		}
		if cert, ok := issuedBy(w, ClusterResourceNamespace, ca.SecretName); !ok || !cert.Typed.(*cmv1.Certificate).Spec.IsCA {
			v = append(v, fmt.Sprintf("%s: CA Secret %s is neither rendered nor issued by a rendered CA Certificate in %s", o, ca.SecretName, ClusterResourceNamespace))
		}
	}
	for _, o := range w.Find(cmv1.IssuerKind, "") {
		ca := o.Typed.(*cmv1.Issuer).Spec.CA
		if ca == nil {
			continue
		}
		if _, ok := w.get("Secret", o.Namespace, ca.SecretName); ok {
			continue
		}
		if cert, ok := issuedBy(w, o.Namespace, ca.SecretName); !ok || !cert.Typed.(*cmv1.Certificate).Spec.IsCA {
			v = append(v, fmt.Sprintf("%s: CA Secret %s is neither rendered nor issued by a rendered CA Certificate", o, ca.SecretName))
		}
	}
	return v
}

// ClusterResourceNamespace is where cert-manager keeps ClusterIssuers'
// Secrets (its --cluster-resource-namespace, cert-manager by default).
const ClusterResourceNamespace = "cert-manager"

// issuedBy finds the Certificate in ns that writes Secret secret.
func issuedBy(w *World, ns, secret string) (Object, bool) {
	for _, o := range w.Find("Certificate", ns) {
		if o.Typed.(*cmv1.Certificate).Spec.SecretName == secret {
			return o, true
		}
	}
	return Object{}, false
}

// serviceNames are the DNS names of a Service inside the cluster.
func serviceNames(svc, ns string) []string {
	return []string{svc, svc + "." + ns, svc + "." + ns + ".svc", svc + "." + ns + ".svc.cluster.local"}
}

// gtrIngress proves what may reach a GTR pod: anyone its partners' ports,
// gRPC and REST (partners come through the load balancer, with no pod
// identity to select), pods of its namespace labelled as admin clients its
// admin port, the global Prometheus its metrics port (CheckScrape proves
// that one gets through), and nobody any other port; and that partners,
// on each partners' port, and admin clients do get through.
func gtrIngress(w *World) []string {
	var v []string
	admin, _ := w.pod(GTRNamespace, "admin-client")
	partner, _ := w.pod("default", "outsider")
	found := false
	for _, gtr := range w.Pods {
		if !isGTR(gtr) {
			continue
		}
		found = true
		for _, src := range w.Pods {
			for _, t := range Targets(gtr) {
				if !w.Net.ingressAllows(src, gtr, t.Port, t.Proto) {
					continue
				}
				isAdmin := src.Namespace == GTRNamespace && src.Labels[AdminClientLabel] == "true"
				if !(isGTRPartnerPort(t) || t == Target{7071, corev1.ProtocolTCP} && isAdmin ||
					t == Target{GTRMetricsPort, corev1.ProtocolTCP} && isGlobalPrometheus(src)) {
					v = append(v, fmt.Sprintf("%s admits %s on %s: the GTR admits partners on 7070 and 7060, admin clients on 7071 and the global Prometheus on %d only", gtr, src, t, GTRMetricsPort))
				}
			}
		}
		for _, l := range gtrPartnerListeners {
			if !w.Net.Allowed(partner, gtr, l.port, corev1.ProtocolTCP) {
				v = append(v, fmt.Sprintf("partners cannot reach %s on %d/TCP (%s)", gtr, l.port, l.what))
			}
		}
		if !w.Net.Allowed(admin, gtr, 7071, corev1.ProtocolTCP) {
			v = append(v, fmt.Sprintf("an admin client cannot reach %s on 7071/TCP", gtr))
		}
	}
	_ = found // no GTR at all is CheckPlatform's to report
	return v
}
