package check

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	cmv1 "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// withGTR returns a copy of objs whose GTR Deployment has been through
// change (on a deep copy, so that objs is left alone).
func withGTR(t *testing.T, objs []Object, change func(d *appsv1.Deployment)) []Object {
	t.Helper()
	out := append([]Object(nil), objs...)
	for i, o := range out {
		if d, ok := o.Typed.(*appsv1.Deployment); ok && o.Namespace == GTRNamespace && o.Name == "gtr" {
			d = d.DeepCopy()
			change(d)
			out[i].Typed = d
			return out
		}
	}
	t.Fatal("no GTR Deployment rendered")
	return nil
}

func without(objs []Object, kind, ns, name string) []Object {
	var out []Object
	for _, o := range objs {
		if !(o.GVK.Kind == kind && o.Namespace == ns && o.Name == name) {
			out = append(out, o)
		}
	}
	return out
}

// gtrContainer is the GTR's container in d.
func gtrContainer(d *appsv1.Deployment) *corev1.Container { return &d.Spec.Template.Spec.Containers[0] }

func setEnv(c *corev1.Container, e corev1.EnvVar) {
	for i := range c.Env {
		if c.Env[i].Name == e.Name {
			c.Env[i] = e
			return
		}
	}
	c.Env = append(c.Env, e)
}

// TestReflectionCheck enables reflection on the GTR in every way a
// manifest could, and expects each to be refused; the ways that leave it
// off must pass.
func TestReflectionCheck(t *testing.T) {
	base := renderAll(t, deployDir)
	flags := configMapObject(t, GTRNamespace, "gtr-flags", map[string]string{"GTR_REFLECTION": "1"})
	other := configMapObject(t, GTRNamespace, "gtr-other", map[string]string{"GTR_LOG": "debug"})
	cases := []struct {
		name   string
		change func(c *corev1.Container)
		add    []Object
		want   string // "" for no violation
	}{
		{"env 1", func(c *corev1.Container) { setEnv(c, corev1.EnvVar{Name: "GTR_REFLECTION", Value: "1"}) }, nil, "GTR_REFLECTION=1 from env"},
		{"env true", func(c *corev1.Container) { setEnv(c, corev1.EnvVar{Name: "GTR_REFLECTION", Value: "true"}) }, nil, "GTR_REFLECTION=true from env"},
		{"env from a ConfigMap key", func(c *corev1.Container) {
			setEnv(c, corev1.EnvVar{Name: "GTR_REFLECTION", ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{
				LocalObjectReference: corev1.LocalObjectReference{Name: "gtr-flags"}, Key: "GTR_REFLECTION"}}})
		}, []Object{flags}, "GTR_REFLECTION may be set: env GTR_REFLECTION from valueFrom"},
		{"envFrom a rendered ConfigMap", func(c *corev1.Container) {
			c.EnvFrom = append(c.EnvFrom, corev1.EnvFromSource{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "gtr-flags"}}})
		}, []Object{flags}, "GTR_REFLECTION=1 from envFrom ConfigMap gtr-flags"},
		{"envFrom an object not rendered", func(c *corev1.Container) {
			c.EnvFrom = append(c.EnvFrom, corev1.EnvFromSource{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "elsewhere"}}})
		}, nil, "GTR_REFLECTION may be set: envFrom Secret elsewhere, which is not rendered"},
		{"flag", func(c *corev1.Container) { c.Args = append(c.Args, "-reflection") }, nil, "flag -reflection"},
		{"flag =true", func(c *corev1.Container) { c.Args = append(c.Args, "--reflection=true") }, nil, "flag --reflection=true"},
		{"flag =1 in command", func(c *corev1.Container) { c.Command = []string{"/gtr", "-reflection=1"} }, nil, "flag -reflection=1"},
		// Off, and so allowed.
		{"env 0", func(c *corev1.Container) { setEnv(c, corev1.EnvVar{Name: "GTR_REFLECTION", Value: "0"}) }, nil, ""},
		{"env wins over envFrom", func(c *corev1.Container) {
			c.EnvFrom = append(c.EnvFrom, corev1.EnvFromSource{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "gtr-flags"}}})
			setEnv(c, corev1.EnvVar{Name: "GTR_REFLECTION", Value: ""})
		}, []Object{flags}, ""},
		{"envFrom without the key", func(c *corev1.Container) {
			c.EnvFrom = append(c.EnvFrom, corev1.EnvFromSource{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "gtr-other"}}})
		}, []Object{other}, ""},
		{"flag =false", func(c *corev1.Container) { c.Args = append(c.Args, "-reflection=false") }, nil, ""},
		{"another flag", func(c *corev1.Container) { c.Args = append(c.Args, "-reflectionless") }, nil, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			objs := withGTR(t, base, func(d *appsv1.Deployment) { c.change(gtrContainer(d)) })
			got := reflectionViolations(Check(append(objs, c.add...)))
			if c.want == "" {
				if len(got) > 0 {
					t.Errorf("reflection is off, yet:\n%s", strings.Join(got, "\n"))
				}
				return
			}
			want := "Deployment cellpay-gtr/gtr container gtr: gRPC reflection on the partners' listener: " + c.want + ";"
			if len(got) != 1 || !strings.HasPrefix(got[0], want) {
				t.Errorf("got %q, want one violation starting %q", got, want)
			}
		})
	}

	// Any GTR container of any object, by its image: a second Deployment
	// elsewhere, and an init container.
	objs := renderAll(t, deployDir)
	for _, o := range objs {
		if d, ok := o.Typed.(*appsv1.Deployment); ok && o.Namespace == GTRNamespace && o.Name == "gtr" {
			d = d.DeepCopy()
			d.Name, d.Namespace = "gtr-debug", "sandbox"
			c := gtrContainer(d)
			c.Image = GTRImage + "@sha256:" + strings.Repeat("0", 64)
			setEnv(c, corev1.EnvVar{Name: "GTR_REFLECTION", Value: "1"})
			init := *c
			init.Name, init.Image = "warm", GTRImage+":v0.1.0"
			d.Spec.Template.Spec.InitContainers = []corev1.Container{init}
			objs = append(objs, Object{GVK: o.GVK, Namespace: "sandbox", Name: "gtr-debug", Typed: d})
		}
	}
	got := strings.Join(reflectionViolations(Check(objs)), "\n")
	for _, want := range []string{"Deployment sandbox/gtr-debug container gtr: gRPC reflection", "Deployment sandbox/gtr-debug container warm: gRPC reflection"} {
		if !strings.Contains(got, want) {
			t.Errorf("no violation %q; got:\n%s", want, got)
		}
	}
}

func reflectionViolations(v []string) []string {
	var out []string
	for _, x := range v {
		if strings.Contains(x, "reflection") {
			out = append(out, x)
		}
	}
	return out
}

// configMapObject is a rendered-looking ConfigMap for tests.
func configMapObject(t *testing.T, ns, name string, data map[string]string) Object {
	t.Helper()
	cm := &corev1.ConfigMap{Data: data}
	cm.Name, cm.Namespace = name, ns
	return Object{GVK: corev1.SchemeGroupVersion.WithKind("ConfigMap"), Namespace: ns, Name: name, Typed: cm}
}

func TestIsGTRImage(t *testing.T) {
	for image, want := range map[string]bool{
		"ghcr.io/cellpay/gtr":                 true,
		"ghcr.io/cellpay/gtr:v0.1.0":          true,
		"ghcr.io/cellpay/gtr@sha256:abc":      true,
		"ghcr.io/cellpay/gtr:v1@sha256:abc":   true,
		"ghcr.io/cellpay/gtrctl:v0.1.0":       false,
		"ghcr.io/cellpay/cell:v0.1.0":         false,
		"registry:5000/ghcr.io/cellpay/gtr:1": false,
	} {
		if got := isGTRImage(image); got != want {
			t.Errorf("isGTRImage(%q) = %v, want %v", image, got, want)
		}
	}
}

// TestTrustChecksCatch breaks the GTR's TLS, probes, registry and policies
// in the ways the checks exist for, and expects each to be reported.
func TestTrustChecksCatch(t *testing.T) {
	base := renderAll(t, deployDir)
	mount := func(d *appsv1.Deployment, name string) *corev1.VolumeMount {
		c := gtrContainer(d)
		for i := range c.VolumeMounts {
			if c.VolumeMounts[i].Name == name {
				return &c.VolumeMounts[i]
			}
		}
		t.Fatalf("no mount %s", name)
		return nil
	}
	cases := []struct {
		name  string
		objs  func() []Object
		wants []string
	}{
		{"probes on the TLS port", func() []Object {
			return withGTR(t, base, func(d *appsv1.Deployment) {
				c := gtrContainer(d)
				c.ReadinessProbe.GRPC.Port, c.StartupProbe.GRPC.Port = 7070, 7070
			})
		}, []string{
			"container gtr: readiness probe asks port 7070, a TLS listener",
			"container gtr: startup probe asks port 7070, a TLS listener",
		}},
		{"probes on the admin port", func() []Object {
			return withGTR(t, base, func(d *appsv1.Deployment) {
				gtrContainer(d).LivenessProbe.GRPC.Port = 7071
			})
		}, []string{"container gtr: liveness probe asks port 7071, a TLS listener"}},
		{"probes on the REST port", func() []Object {
			return withGTR(t, base, func(d *appsv1.Deployment) {
				gtrContainer(d).LivenessProbe.GRPC.Port = 7060
			})
		}, []string{"container gtr: liveness probe asks port 7060, a TLS listener"}},
		{"REST listener off", func() []Object {
			return withGTR(t, base, func(d *appsv1.Deployment) { dropEnv(gtrContainer(d), "GTR_REST_LISTEN") })
		}, []string{"Deployment cellpay-gtr/gtr container gtr: GTR_REST_LISTEN is not set: partners get no REST/JSON on 7060"}},
		{"REST listener on loopback", func() []Object {
			return withGTR(t, base, func(d *appsv1.Deployment) {
				setEnv(gtrContainer(d), corev1.EnvVar{Name: "GTR_REST_LISTEN", Value: "127.0.0.1:7060"})
			})
		}, []string{`GTR_REST_LISTEN: "127.0.0.1:7060" is loopback: partners cannot reach the REST/JSON listener`}},
		{"REST listener on another port", func() []Object {
			return withGTR(t, base, func(d *appsv1.Deployment) {
				setEnv(gtrContainer(d), corev1.EnvVar{Name: "GTR_REST_LISTEN", Value: ":8443"})
			})
		}, []string{`GTR_REST_LISTEN is ":8443", want port 7060`}},
		{"gRPC listener on loopback", func() []Object {
			return withGTR(t, base, func(d *appsv1.Deployment) { dropEnv(gtrContainer(d), "GTR_LISTEN") })
		}, []string{"GTR_LISTEN: not set (the default is loopback): partners cannot reach the gRPC listener"}},
		{"REST port not declared", func() []Object {
			return withGTR(t, base, func(d *appsv1.Deployment) {
				c := gtrContainer(d)
				c.Ports = slices.DeleteFunc(c.Ports, func(p corev1.ContainerPort) bool { return p.ContainerPort == 7060 })
			})
		}, []string{"gtr does not declare port 7060", "Service gtr does not expose the partners' REST/JSON port 7060/TCP"}},
		{"admin listener on loopback", func() []Object {
			return withGTR(t, base, func(d *appsv1.Deployment) {
				setEnv(gtrContainer(d), corev1.EnvVar{Name: "GTR_ADMIN_LISTEN", Value: "127.0.0.1:7071"})
			})
		}, []string{`GTR_ADMIN_LISTEN: "127.0.0.1:7071" is loopback`}},
		{"loopback not throttled", func() []Object {
			return withGTR(t, base, func(d *appsv1.Deployment) {
				setEnv(gtrContainer(d), corev1.EnvVar{Name: "GTR_ADMIN_THROTTLE_LOOPBACK", Value: "false"})
			})
		}, []string{`Deployment cellpay-gtr/gtr container gtr: GTR_ADMIN_THROTTLE_LOOPBACK is "false", want "true"`}},
		{"loopback throttle left to the default", func() []Object {
			return withGTR(t, base, func(d *appsv1.Deployment) { dropEnv(gtrContainer(d), "GTR_ADMIN_THROTTLE_LOOPBACK") })
		}, []string{`Deployment cellpay-gtr/gtr container gtr: GTR_ADMIN_THROTTLE_LOOPBACK is "", want "true"`}},
		{"loopback throttle off by flag", func() []Object {
			return withGTR(t, base, func(d *appsv1.Deployment) {
				gtrContainer(d).Args = append(gtrContainer(d).Args, "--admin-throttle-loopback=0")
			})
		}, []string{"container gtr: flag --admin-throttle-loopback=0: failed admin logins from loopback (kubectl port-forward) not throttled"}},
		{"certificate mounted by subPath", func() []Object {
			return withGTR(t, base, func(d *appsv1.Deployment) {
				c := gtrContainer(d)
				m := mount(d, "tls")
				m.MountPath, m.SubPath = "/etc/cellpay/tls/tls.crt", "tls.crt"
				c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: "tls", MountPath: "/etc/cellpay/tls/tls.key", SubPath: "tls.key", ReadOnly: true})
			})
		}, []string{"gtr: GTR_TLS_CERT is mounted with subPath", "gtr: GTR_TLS_KEY is mounted with subPath"}},
		{"key file swapped", func() []Object {
			return withGTR(t, base, func(d *appsv1.Deployment) {
				setEnv(gtrContainer(d), corev1.EnvVar{Name: "GTR_TLS_KEY", Value: "/etc/cellpay/tls/ca.crt"})
			})
		}, []string{"gtr: GTR_TLS_KEY is key ca.crt of its Secret, want tls.key"}},
		{"no TLS", func() []Object {
			return withGTR(t, base, func(d *appsv1.Deployment) {
				c := gtrContainer(d)
				var env []corev1.EnvVar
				for _, e := range c.Env {
					if e.Name != "GTR_TLS_CERT" {
						env = append(env, e)
					}
				}
				c.Env = env
			})
		}, []string{"gtr has no GTR_TLS_CERT"}},
		{"certificate not rendered", func() []Object {
			return without(base, "Certificate", GTRNamespace, "gtr")
		}, []string{"gtr: TLS Secret gtr-tls is issued by no rendered Certificate in cellpay-gtr"}},
		{"certificate for the wrong names", func() []Object {
			var out []Object
			for _, o := range base {
				if c, ok := o.Typed.(*cmv1.Certificate); ok && o.Name == "gtr" {
					c = c.DeepCopy()
					c.Spec.DNSNames = []string{"gtr"}
					c.Spec.Usages = []cmv1.KeyUsage{cmv1.UsageClientAuth}
					o.Typed = c
				}
				out = append(out, o)
			}
			return out
		}, []string{
			"Certificate cellpay-gtr/gtr: dnsNames lack gtr.cellpay-gtr.svc.cluster.local",
			"Certificate cellpay-gtr/gtr: usages lack server auth",
		}},
		{"issuer missing", func() []Object {
			return without(base, cmv1.IssuerKind, GTRNamespace, "gtr-selfsigned")
		}, []string{"Certificate cellpay-gtr/gtr-ca: Issuer gtr-selfsigned is not rendered"}},
		{"CA issuer without its CA", func() []Object {
			return without(base, "Certificate", GTRNamespace, "gtr-ca")
		}, []string{"Issuer cellpay-gtr/gtr-ca: CA Secret gtr-ca is neither rendered nor issued"}},
		{"partner registry in a ConfigMap", func() []Object {
			reg := configMapObject(t, GTRNamespace, "gtr-partners-plain", map[string]string{"partners.yaml": "version: 1\npartners: []\n"})
			return append(withGTR(t, base, func(d *appsv1.Deployment) {
				for i, v := range d.Spec.Template.Spec.Volumes {
					if v.Name == "partners" {
						d.Spec.Template.Spec.Volumes[i].VolumeSource = corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
							LocalObjectReference: corev1.LocalObjectReference{Name: "gtr-partners-plain"}}}
					}
				}
			}), reg)
		}, []string{"gtr: GTR_PARTNERS /etc/cellpay/partners/partners.yaml is not in a Secret volume"}},
		{"partner registry Secret not rendered", func() []Object {
			var out []Object
			for _, o := range base {
				if !(o.GVK.Kind == "Secret" && strings.HasPrefix(o.Name, "gtr-partners-")) {
					out = append(out, o)
				}
			}
			return out
		}, []string{"gtr: GTR_PARTNERS /etc/cellpay/partners/partners.yaml is in Secret gtr-partners-"}},
		{"admin port opened to all", func() []Object {
			return append(base, policy(t, GTRNamespace, "metadata: {name: admin-open}\nspec:\n  podSelector: {matchLabels: {app.kubernetes.io/name: gtr}}\n"+
				"  ingress: [{ports: [{port: 7071}]}]\n"))
		}, []string{"cellpay-gtr/gtr admits default/outsider on 7071/TCP", "cellpay-gtr/gtr admits default/spoofed-admin-client on 7071/TCP"}},
		{"every GTR port opened", func() []Object {
			return append(base, policy(t, GTRNamespace, "metadata: {name: all-open}\nspec: {podSelector: {}, ingress: [{}]}\n"))
		}, []string{"cellpay-gtr/gtr admits default/outsider on 22/TCP", "cellpay-gtr/gtr admits cellpay-gtr/admin-client on 9090/TCP"}},
		{"partners shut out", func() []Object {
			return without(base, "NetworkPolicy", GTRNamespace, "gtr-ingress")
		}, []string{
			"partners cannot reach cellpay-gtr/gtr on 7070/TCP", "partners cannot reach cellpay-gtr/gtr on 7060/TCP",
			"partners cannot reach cellpay-gtr/gtr-backup on 7060/TCP", "an admin client cannot reach cellpay-gtr/gtr on 7071/TCP",
		}},
		{"REST port for admin clients only", func() []Object {
			return append(withIngressPorts(t, base, 7070), policy(t, GTRNamespace, "metadata: {name: rest-admin}\nspec:\n"+
				"  podSelector: {matchLabels: {app.kubernetes.io/name: gtr}}\n"+
				"  ingress: [{from: [{podSelector: {matchLabels: {cellpay.io/admin-client: \"true\"}}}], ports: [{port: 7060}]}]\n"))
		}, []string{"partners cannot reach cellpay-gtr/gtr on 7060/TCP", "partners cannot reach cellpay-gtr/gtr-backup on 7060/TCP"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := strings.Join(Check(c.objs()), "\n")
			for _, want := range c.wants {
				if !strings.Contains(got, want) {
					t.Errorf("no violation %q; got:\n%s", want, got)
				}
			}
		})
	}
}

// withIngressPorts returns a copy of objs whose policy gtr-ingress opens
// only ports of its partners' rule (the one without from) to partners.
func withIngressPorts(t *testing.T, objs []Object, ports ...int32) []Object {
	t.Helper()
	out := append([]Object(nil), objs...)
	for i, o := range out {
		if p, ok := o.Typed.(*networkingv1.NetworkPolicy); ok && o.Namespace == GTRNamespace && o.Name == "gtr-ingress" {
			p = p.DeepCopy()
			for j, r := range p.Spec.Ingress {
				if len(r.From) == 0 {
					p.Spec.Ingress[j].Ports = nil
					for _, port := range ports {
						p.Spec.Ingress[j].Ports = append(p.Spec.Ingress[j].Ports, networkingv1.NetworkPolicyPort{
							Protocol: new(corev1.ProtocolTCP), Port: new(intstr.FromInt32(port))})
					}
				}
			}
			out[i].Typed = p
			return out
		}
	}
	t.Fatal("no NetworkPolicy gtr-ingress rendered")
	return nil
}

// TestPartnersPortsAlike: the REST port (7060) is a partners' port as the
// gRPC one (7070) is: a gtr-ingress that shuts partners out of either one
// is reported for that port, at both access points, and for nothing else.
func TestPartnersPortsAlike(t *testing.T) {
	base := renderAll(t, deployDir)
	for _, tt := range []struct{ open, shut int32 }{{7070, 7060}, {7060, 7070}} {
		got := Check(withIngressPorts(t, base, tt.open))
		want := []string{
			fmt.Sprintf("partners cannot reach cellpay-gtr/gtr on %d/TCP", tt.shut),
			fmt.Sprintf("partners cannot reach cellpay-gtr/gtr-backup on %d/TCP", tt.shut),
		}
		if len(got) != len(want) {
			t.Errorf("only %d open: got %q, want %q", tt.open, got, want)
			continue
		}
		for i := range want {
			if !strings.HasPrefix(got[i], want[i]) {
				t.Errorf("only %d open: got %q, want %q", tt.open, got[i], want[i])
			}
		}
	}
}

// TestOrganisationIssuer does what README.md ("Replacing the issuer") tells
// production to do: drop the bootstrap CA and point the Certificate at a
// ClusterIssuer, with the public name added, and its issuance policy alike. The result must pass the
// checks, and the Certificate must say so.
func TestOrganisationIssuer(t *testing.T) {
	dir := t.TempDir()
	if err := os.CopyFS(dir, os.DirFS(deployDir)); err != nil {
		t.Fatal(err)
	}
	k := filepath.Join(dir, "overlays/platform/kustomization.yaml")
	data, err := os.ReadFile(k)
	if err != nil {
		t.Fatal(err)
	}
	text := strings.Replace(string(data), "  - ../../base/gtr-ca\n", "", 1)
	if text == string(data) {
		t.Fatal("overlays/platform does not list ../../base/gtr-ca")
	}
	text += `patches:
  - target: {group: cert-manager.io, kind: Certificate, name: gtr}
    patch: |
      - op: replace
        path: /spec/issuerRef
        value: {group: cert-manager.io, kind: ClusterIssuer, name: corp-ca}
      - op: add
        path: /spec/dnsNames/-
        value: payments.example.com
  - target: {group: policy.cert-manager.io, kind: CertificateRequestPolicy, name: cellpay-gtr.gtr}
    patch: |
      - op: replace
        path: /spec/selector/issuerRef
        value: {group: cert-manager.io, kind: ClusterIssuer, name: corp-ca}
      - op: add
        path: /spec/allowed/dnsNames/values/-
        value: payments.example.com
`
	if err := os.WriteFile(k, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	objs := renderAll(t, dir)
	for _, v := range Check(objs) {
		t.Error(v)
	}
	w := NewWorld(objs)
	if len(w.Find(cmv1.IssuerKind, GTRNamespace)) != 0 {
		t.Error("bootstrap Issuers still rendered")
	}
	cert, ok := w.get("Certificate", GTRNamespace, "gtr")
	if !ok {
		t.Fatal("no Certificate gtr")
	}
	spec := cert.Typed.(*cmv1.Certificate).Spec
	if spec.IssuerRef.Kind != cmv1.ClusterIssuerKind || !slices.Contains(spec.DNSNames, "payments.example.com") {
		t.Errorf("issuerRef %+v, dnsNames %v", spec.IssuerRef, spec.DNSNames)
	}
}

// TestAccessPointChecksCatch: the backup access point's faults are each
// reported, and its pods get exactly the primary's network access.
func TestAccessPointChecksCatch(t *testing.T) {
	base := renderAll(t, deployDir)
	if v := CheckAccessPoints(NewWorld(base)); len(v) != 0 {
		t.Fatalf("the committed manifests: %v", v)
	}
	edit := func(kind, name string, f func(Object)) []Object {
		objs := make([]Object, len(base))
		copy(objs, base)
		for i, o := range objs {
			if o.GVK.Kind == kind && o.Namespace == GTRNamespace && o.Name == name {
				switch x := o.Typed.(type) {
				case *appsv1.Deployment:
					objs[i].Typed = x.DeepCopy()
				case *corev1.Service:
					objs[i].Typed = x.DeepCopy()
				}
				f(objs[i])
			}
		}
		return objs
	}
	for _, tt := range []struct {
		name string
		objs []Object
		want string
	}{
		{"no backup", without(base, "Deployment", GTRNamespace, "gtr-backup"), "no Deployment gtr-backup"},
		{"another image", edit("Deployment", "gtr-backup", func(o Object) {
			o.Typed.(*appsv1.Deployment).Spec.Template.Spec.Containers[0].Image = "ghcr.io/cellpay/gtr:v0.0.9"
		}), "pod spec differs"},
		{"not a GTR to the policies", edit("Deployment", "gtr-backup", func(o Object) {
			o.Typed.(*appsv1.Deployment).Spec.Template.Labels[NameLabel] = "gtr2"
		}), "NetworkPolicies do not apply"},
		{"primary Service selects both", edit("Service", "gtr", func(o Object) {
			delete(o.Typed.(*corev1.Service).Spec.Selector, AccessPointLabel)
		}), `Service gtr selects`},
		{"backup Service without the REST port", edit("Service", "gtr-backup", func(o Object) {
			svc := o.Typed.(*corev1.Service)
			svc.Spec.Ports = slices.DeleteFunc(svc.Spec.Ports, func(p corev1.ServicePort) bool { return p.Port == 7060 })
		}), "Service gtr-backup does not expose the partners' REST/JSON port 7060/TCP"},
		{"REST port to the admin port", edit("Service", "gtr", func(o Object) {
			for i, p := range o.Typed.(*corev1.Service).Spec.Ports {
				if p.Port == 7060 {
					o.Typed.(*corev1.Service).Spec.Ports[i].TargetPort = intstr.FromString("admin")
				}
			}
		}), "Service gtr does not expose the partners' REST/JSON port 7060/TCP"},
		{"gRPC port by another number", edit("Service", "gtr", func(o Object) {
			for i, p := range o.Typed.(*corev1.Service).Spec.Ports {
				if p.Port == 7070 {
					o.Typed.(*corev1.Service).Spec.Ports[i].Port = 443
				}
			}
		}), "Service gtr does not expose the partners' gRPC port 7070/TCP"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := strings.Join(CheckAccessPoints(NewWorld(tt.objs)), "\n")
			if !strings.Contains(got, tt.want) {
				t.Errorf("no violation %q; got:\n%s", tt.want, got)
			}
		})
	}
	// The same access: every pod of both Deployments is a GTR to the
	// boundary, so CheckBoundary's proof covers the backup.
	w := NewWorld(base)
	prim, back := 0, 0
	for _, p := range w.PodsIn(GTRNamespace) {
		switch {
		case isGTR(p) && p.Labels[AccessPointLabel] == "primary":
			prim++
		case isGTR(p) && p.Labels[AccessPointLabel] == "backup":
			back++
		}
	}
	if prim == 0 || back == 0 {
		t.Fatalf("GTR pods in the world: %d primary, %d backup", prim, back)
	}
}
