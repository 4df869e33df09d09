package check

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	cmv1 "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	corev1 "k8s.io/api/core/v1"
)

// The internal hops' identities (internal/hop), as URI SANs.
const (
	spiffePrefix   = "spiffe://cellpay.internal/"
	gtrIdentity    = spiffePrefix + "gtr"
	issuerIdentity = spiffePrefix + "issuer"
	// IssuerImage is the issuer simulator's image.
	IssuerImage = "ghcr.io/cellpay/issuersim"
	// CellImage is the cell's image.
	CellImage     = "ghcr.io/cellpay/cell"
	issuerService = "issuersim"
	issuerNS      = "cellpay-issuer"
)

func cellIdentity(id string) string { return spiffePrefix + "cell/" + id }

// hopEnd is one side of an internal hop as a container runs it: the env
// vars naming its certificate, key and CA files, and what its certificate
// must hold.
type hopEnd struct {
	what           string
	cert, key, ca  string // env vars
	uri            string
	dnsNames       []string
	usages         []cmv1.KeyUsage
	health, listen string // env vars of its health port and TLS port; "" for none
	// unset says what a missing certificate or key means; default: the
	// hop is not mutual TLS.
	unset string
}

// gtrAdminEnd is the GTR's admin listener as a hop end: a server
// certificate with the GTR's identity, of the hops' CA, for Service
// gtr-admin's names, which gtrctl verifies with that CA and pins. It
// verifies no client certificate, so it has no CA file.
var gtrAdminEnd = hopEnd{what: "GTR's admin listener", cert: "GTR_ADMIN_TLS_CERT", key: "GTR_ADMIN_TLS_KEY",
	uri: gtrIdentity, dnsNames: serviceNames(gtrAdminService, GTRNamespace), usages: []cmv1.KeyUsage{cmv1.UsageServerAuth},
	unset: "the admin listener serves the partners' certificate, of another CA and without the GTR's identity, which gtrctl pins"}

// CheckHopTLS checks the internal hops' mutual TLS as the pods run it:
//
//   - every cell, issuer and GTR container reads its certificate, key and
//     CA as tls.crt, tls.key and ca.crt of one Secret, mounted whole (a
//     subPath mount never sees a renewal), which a rendered Certificate in
//     its namespace issues with the hop's URI SAN (a cell's
//     spiffe://cellpay.internal/cell/<namespace>, the issuer's, the
//     GTR's), the DNS names of the Service its callers dial, and the
//     usages of its side;
//   - every GTR container's admin listener serves its own certificate
//     (GTR_ADMIN_TLS_CERT, GTR_ADMIN_TLS_KEY) in the same way: the GTR's
//     identity for Service gtr-admin's names, a hop certificate, so that
//     gtrctl verifies it with the internal CA and pins the identity;
//   - every hop Certificate, NATS's and the replicator's too, names one
//     and the same issuer, so that the CA each side verifies the other
//     with (its Secret's ca.crt) is one; since cells live in namespaces of
//     their own, that issuer is a ClusterIssuer;
//   - cells' and the issuer's probes ask their plaintext health port, never
//     their mutual-TLS port, which kubelet's probes cannot speak to;
//   - no cell, issuer or GTR container opts into plaintext hops
//     (-insecure-plaintext, or its env form *_INSECURE_PLAINTEXT);
//   - no GTR container uses the legacy shared admin token.
func CheckHopTLS(w *World) []string {
	var v []string
	var hopCerts []Object
	for _, o := range w.Objects {
		tmpl, ok := podTemplate(o)
		if !ok {
			continue
		}
		for _, c := range tmpl.Spec.Containers {
			var end hopEnd
			var more []hopEnd // the container's other TLS servers
			switch imageName(c.Image) {
			case CellImage:
				end = hopEnd{what: "cell", cert: "CELL_TLS_CERT", key: "CELL_TLS_KEY", ca: "CELL_TLS_CA",
					uri: cellIdentity(o.Namespace), dnsNames: append(serviceNames("cell", o.Namespace), o.Namespace+".cellpay.internal"),
					usages: []cmv1.KeyUsage{cmv1.UsageServerAuth, cmv1.UsageClientAuth}, health: "CELL_HEALTH_LISTEN", listen: "CELL_LISTEN"}
			case IssuerImage:
				end = hopEnd{what: "issuer", cert: "ISSUERSIM_TLS_CERT", key: "ISSUERSIM_TLS_KEY", ca: "ISSUERSIM_TLS_CA",
					uri: issuerIdentity, dnsNames: serviceNames(issuerService, issuerNS),
					usages: []cmv1.KeyUsage{cmv1.UsageServerAuth}, health: "ISSUERSIM_HEALTH_LISTEN", listen: "ISSUERSIM_LISTEN"}
			case GTRImage:
				end = hopEnd{what: "GTR", cert: "GTR_CELL_TLS_CERT", key: "GTR_CELL_TLS_KEY", ca: "GTR_CELL_CA",
					uri: gtrIdentity, usages: []cmv1.KeyUsage{cmv1.UsageClientAuth}}
				more = append(more, gtrAdminEnd)
				for _, e := range c.Env {
					if e.Name == "GTR_ADMIN_TOKEN" || e.Name == "GTR_ADMIN_TOKEN_FILE" {
						v = append(v, fmt.Sprintf("%s container %s: %s: the legacy shared admin token; operators authenticate by their own tokens (GTR_OPERATORS)", o, c.Name, e.Name))
					}
				}
			default:
				continue
			}
			at := fmt.Sprintf("%s container %s", o, c.Name)
			v = append(v, insecurePlaintext(at, c)...)
			for _, e := range append([]hopEnd{end}, more...) {
				cert, msgs := hopFiles(w, at, o.Namespace, tmpl.Spec, c, e)
				v = append(v, msgs...)
				if cert.Name != "" {
					hopCerts = append(hopCerts, cert)
				}
			}
			if end.health != "" {
				v = append(v, healthProbes(at, c, end)...)
			}
		}
	}
	for _, name := range []string{"cellpay-nats/nats", "cellpay-nats/replicator"} {
		ns, n, _ := strings.Cut(name, "/")
		if o, ok := w.get("Certificate", ns, n); ok {
			hopCerts = append(hopCerts, o)
		}
	}
	return append(v, oneIssuer(w, hopCerts)...)
}

// imageName is an image reference without its tag or digest.
func imageName(image string) string {
	name, _, _ := strings.Cut(image, "@")
	if colon := strings.LastIndex(name, ":"); colon > strings.LastIndex(name, "/") {
		name = name[:colon]
	}
	return name
}

// hopFiles checks one container's TLS files and returns the Certificate
// that issues them.
func hopFiles(w *World, at, ns string, spec corev1.PodSpec, c corev1.Container, end hopEnd) (Object, []string) {
	var v []string
	secret := ""
	files := []struct{ env, key string }{{end.cert, "tls.crt"}, {end.key, "tls.key"}}
	if end.ca != "" {
		files = append(files, struct{ env, key string }{end.ca, "ca.crt"})
	}
	for _, f := range files {
		file := envOf(c, f.env)
		if file == "" {
			v = append(v, fmt.Sprintf("%s: no %s: %s", at, f.env, cmp.Or(end.unset, "the "+end.what+"'s hop is not mutual TLS")))
			continue
		}
		src, ok := resolveFile(spec, c, file)
		switch {
		case !ok:
			v = append(v, fmt.Sprintf("%s: %s %s is in no volume mount", at, f.env, file))
			continue
		case src.Volume.Secret == nil:
			v = append(v, fmt.Sprintf("%s: %s %s is not in a Secret volume", at, f.env, file))
			continue
		case src.Mount.SubPath != "" || src.Mount.SubPathExpr != "":
			v = append(v, fmt.Sprintf("%s: %s is mounted with subPath: kubelet never updates it, so a renewed certificate is not seen; mount the Secret as a directory", at, f.env))
		case src.Key != f.key:
			v = append(v, fmt.Sprintf("%s: %s is key %s of its Secret, want %s (what cert-manager writes)", at, f.env, src.Key, f.key))
		}
		if secret != "" && src.Volume.Secret.SecretName != secret {
			if end.ca != "" {
				v = append(v, fmt.Sprintf("%s: %s, %s and %s are not of one Secret: the CA must be the one that issued the certificate", at, end.cert, end.key, end.ca))
			} else {
				v = append(v, fmt.Sprintf("%s: %s and %s are not of one Secret", at, end.cert, end.key))
			}
		}
		secret = src.Volume.Secret.SecretName
	}
	if secret == "" {
		return Object{}, v
	}
	cert, ok := issuedBy(w, ns, secret)
	if !ok {
		return Object{}, append(v, fmt.Sprintf("%s: TLS Secret %s is issued by no rendered Certificate in %s", at, secret, ns))
	}
	cs := cert.Typed.(*cmv1.Certificate).Spec
	if !slices.Contains(cs.URIs, end.uri) {
		v = append(v, fmt.Sprintf("%s: uris %v lack %s, the %s's identity", cert, cs.URIs, end.uri, end.what))
	}
	for _, u := range cs.URIs {
		if u != end.uri && strings.HasPrefix(u, spiffePrefix) {
			v = append(v, fmt.Sprintf("%s: uris hold %s besides %s: one identity per certificate", cert, u, end.uri))
		}
	}
	for _, name := range end.dnsNames {
		if !slices.Contains(cs.DNSNames, name) {
			v = append(v, fmt.Sprintf("%s: dnsNames lack %s, a name its callers dial", cert, name))
		}
	}
	for _, u := range end.usages {
		if !slices.Contains(cs.Usages, u) {
			v = append(v, fmt.Sprintf("%s: usages lack %s", cert, u))
		}
	}
	if cs.IsCA {
		v = append(v, fmt.Sprintf("%s: the %s's certificate is a CA (isCA)", cert, end.what))
	}
	return cert, v
}

// healthProbes holds a hop server's probes to its health port.
func healthProbes(at string, c corev1.Container, end hopEnd) []string {
	health, err := listenPort(envOf(c, end.health))
	if err != nil {
		return []string{fmt.Sprintf("%s: %s: %v: kubelet's probes need the plaintext health port", at, end.health, err)}
	}
	tls, _ := listenPort(envOf(c, end.listen))
	var v []string
	for _, p := range []struct {
		kind  string
		probe *corev1.Probe
	}{{"startup", c.StartupProbe}, {"readiness", c.ReadinessProbe}, {"liveness", c.LivenessProbe}} {
		if p.probe == nil || p.probe.GRPC == nil {
			continue // CheckWorkloads' to report
		}
		switch port := p.probe.GRPC.Port; {
		case port == tls:
			v = append(v, fmt.Sprintf("%s: %s probe asks port %d, the mutual-TLS port, which kubelet's probes cannot present a certificate to; probe the health port %d", at, p.kind, port, health))
		case port != health:
			v = append(v, fmt.Sprintf("%s: %s probe asks port %d, want the health port %d", at, p.kind, port, health))
		}
	}
	return v
}

// oneIssuer holds every hop certificate to one issuer: one ClusterIssuer
// (rendered or the cluster's own), or one Issuer when every hop
// certificate is in its namespace.
func oneIssuer(w *World, certs []Object) []string {
	if len(certs) == 0 {
		return nil
	}
	type key struct{ group, kind, name, ns string }
	keyOf := func(o Object) key {
		ref := o.Typed.(*cmv1.Certificate).Spec.IssuerRef
		k := key{ref.Group, ref.Kind, ref.Name, ""}
		if k.group == "" {
			k.group = "cert-manager.io"
		}
		if k.kind == "" {
			k.kind = cmv1.IssuerKind
		}
		if k.group == "cert-manager.io" && k.kind == cmv1.IssuerKind {
			k.ns = o.Namespace // an Issuer signs in its own namespace only
		}
		return k
	}
	first := keyOf(certs[0])
	var v []string
	for _, o := range certs[1:] {
		if k := keyOf(o); k != first {
			what := fmt.Sprintf("%s %s", k.kind, k.name)
			if k.ns != "" {
				what += " of namespace " + k.ns
			}
			v = append(v, fmt.Sprintf("%s: issued by %s, %s by %s %s: the hops' CAs differ, so their peers would not verify each other; use one ClusterIssuer for all",
				o, what, certs[0], first.kind, first.name))
		}
	}
	return v
}

// insecurePlaintext reports a container that chooses plaintext hops, with
// the flag or its env form: for benchmarks, never a deployment.
func insecurePlaintext(at string, c corev1.Container) []string {
	var v []string
	for _, e := range c.Env {
		if strings.HasSuffix(e.Name, "_INSECURE_PLAINTEXT") {
			v = append(v, fmt.Sprintf("%s: %s: plaintext hops that serve anyone (benchmarks only)", at, e.Name))
		}
	}
	for _, a := range slices.Concat(c.Command, c.Args) {
		if f, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "="); f == "insecure-plaintext" {
			v = append(v, fmt.Sprintf("%s: %s: plaintext hops that serve anyone (benchmarks only)", at, a))
		}
	}
	return v
}
