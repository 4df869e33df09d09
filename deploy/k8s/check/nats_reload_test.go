package check

import (
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
)

// reloaderOf is the reloader container of a NATS pod spec.
func reloaderOf(t *testing.T, spec *corev1.PodSpec) *corev1.Container {
	t.Helper()
	for i := range spec.Containers {
		if imageName(spec.Containers[i].Image) == ReloaderImage {
			return &spec.Containers[i]
		}
	}
	t.Fatal("no reloader container")
	return nil
}

// dropWatch removes "-config file" from a reloader's args.
func dropWatch(c *corev1.Container, file string) {
	for i := 0; i+1 < len(c.Args); i++ {
		if c.Args[i] == "-config" && c.Args[i+1] == file {
			c.Args = slices.Delete(c.Args, i, i+2)
			return
		}
	}
}

// TestNATSReloadChecksCatch breaks the NATS servers' certificate reload one
// way at a time and expects each to be reported.
func TestNATSReloadChecksCatch(t *testing.T) {
	base := renderAll(t, deployDir)
	if v := CheckNATSReload(NewWorld(base)); len(v) != 0 {
		t.Fatalf("the committed manifests: %v", v)
	}
	nats := func(change func(spec *corev1.PodSpec)) []Object {
		return withObject(t, base, "StatefulSet", NATSNamespace, "nats", func(s *appsv1.StatefulSet) { change(&s.Spec.Template.Spec) })
	}
	var confName string
	for _, o := range base {
		if cm, ok := o.Typed.(*corev1.ConfigMap); ok && o.Namespace == NATSNamespace && cm.Data["nats.conf"] != "" {
			confName = o.Name
		}
	}
	conf := func(change func(string) string) []Object {
		return withObject(t, base, "ConfigMap", NATSNamespace, confName, func(cm *corev1.ConfigMap) { cm.Data["nats.conf"] = change(cm.Data["nats.conf"]) })
	}
	const sts = "StatefulSet cellpay-nats/nats"
	cases := []brokenCase{
		{"no reloader", nats(func(s *corev1.PodSpec) {
			s.Containers = slices.DeleteFunc(s.Containers, func(c corev1.Container) bool { return imageName(c.Image) == ReloaderImage })
		}), []string{sts + ": no reloader container (image natsio/nats-server-config-reloader)"}},
		{"process namespace not shared", nats(func(s *corev1.PodSpec) { s.ShareProcessNamespace = nil }),
			[]string{sts + ": shareProcessNamespace is not true: the reloader's signal cannot reach nats-server"}},
		{"the key not watched", nats(func(s *corev1.PodSpec) { dropWatch(reloaderOf(t, s), "/etc/nats-tls/tls.key") }),
			[]string{sts + " container reloader: does not watch /etc/nats-tls/tls.key (tls.key of volume tls, as container nats reads it)"}},
		{"the CA not watched", nats(func(s *corev1.PodSpec) { dropWatch(reloaderOf(t, s), "/etc/nats-tls/ca.crt") }),
			[]string{sts + " container reloader: does not watch /etc/nats-tls/ca.crt"}},
		{"the config not watched", nats(func(s *corev1.PodSpec) { dropWatch(reloaderOf(t, s), "/etc/nats/nats.conf") }),
			[]string{sts + " container reloader: does not watch /etc/nats/nats.conf (nats.conf of volume config"}},
		{"the included file not watched", nats(func(s *corev1.PodSpec) { dropWatch(reloaderOf(t, s), "/etc/nats/auth.conf") }),
			[]string{sts + " container reloader: does not watch /etc/nats/auth.conf"}},
		{"the certificate watched where it is not", nats(func(s *corev1.PodSpec) {
			r := reloaderOf(t, s)
			for i := range r.VolumeMounts {
				if r.VolumeMounts[i].Name == "tls" {
					r.VolumeMounts[i].MountPath = "/etc/tls"
				}
			}
		}), []string{sts + " container reloader: does not watch /etc/nats-tls/tls.crt"}},
		{"a new TLS file not watched", conf(func(c string) string {
			return c + "\nwebsocket {\n  port: 8443\n  tls {\n    cert_file: /etc/nats-tls/ws.crt\n    key_file: /etc/nats-tls/ws.key\n  }\n}\n"
		}), []string{sts + " container reloader: does not watch /etc/nats-tls/ws.crt", sts + " container reloader: does not watch /etc/nats-tls/ws.key"}},
		{"no pid_file", conf(func(c string) string { return strings.Replace(c, "\npid_file:", "\n# pid_file:", 1) }),
			[]string{sts + ": nats.conf sets no pid_file: the reloader cannot find the server to signal"}},
		{"the pid_file on no volume", conf(func(c string) string {
			return strings.Replace(c, "pid_file: /var/run/nats/nats.pid", "pid_file: /tmp/nats.pid", 1)
		}), []string{sts + ": nats.conf's pid_file /tmp/nats.pid is in no volume mount of container nats"}},
		{"the pid read elsewhere", nats(func(s *corev1.PodSpec) {
			r := reloaderOf(t, s)
			r.Args[slices.Index(r.Args, "-pid")+1] = "/var/run/nats/other.pid"
		}), []string{sts + " container reloader: reads the pid from /var/run/nats/other.pid, not from nats.conf's pid_file /var/run/nats/nats.pid"}},
		{"the pid volume not shared", nats(func(s *corev1.PodSpec) {
			r := reloaderOf(t, s)
			r.VolumeMounts = slices.DeleteFunc(r.VolumeMounts, func(m corev1.VolumeMount) bool { return m.Name == "run" })
		}), []string{sts + " container reloader: reads the pid from /var/run/nats/nats.pid, not from nats.conf's pid_file"}},
		{"a reloader that listens", nats(func(s *corev1.PodSpec) {
			r := reloaderOf(t, s)
			r.Ports = append(r.Ports, corev1.ContainerPort{Name: "metrics", ContainerPort: 8080, Protocol: corev1.ProtocolTCP})
		}), []string{sts + " container reloader: declares a port"}},
		{"natsmon as the server's user", nats(func(s *corev1.PodSpec) {
			for i := range s.Containers {
				if s.Containers[i].Name == "natsmon" {
					s.Containers[i].SecurityContext.RunAsUser = nil
				}
			}
		}), []string{sts + " container natsmon: may run as the server's user (1000)"}},
	}
	checkBroken(t, cases)
}

// TestFlagValues holds the reloader's argument parsing to Go's flag syntax.
func TestFlagValues(t *testing.T) {
	args := []string{"-pid", "/a", "-config", "/b", "--config=/c", "-c", "/d", "-other", "x", "-config"}
	if got, want := flagValues(args, "config", "c"), []string{"/b", "/c", "/d"}; !slices.Equal(got, want) {
		t.Errorf("config: %v, want %v", got, want)
	}
	if got := flagValues(args, "pid", "P"); !slices.Equal(got, []string{"/a"}) {
		t.Errorf("pid: %v", got)
	}
}
