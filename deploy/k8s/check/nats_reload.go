package check

import (
	"fmt"
	"path"
	"regexp"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
)

// NATS reloads its certificate. nats-server reads its configuration and
// TLS files at start and on a reload signal only, and cert-manager renews
// the certificate in place: without a signal the servers keep the old one
// until it expires. The NATS project's config reloader, a sidecar, watches
// the files and signals the server when one changes.

// ReloaderImage is the NATS project's config reloader.
const ReloaderImage = "natsio/nats-server-config-reloader"

// reloaderDefaultPID is where the reloader reads the server's pid when no
// -pid flag says otherwise.
const reloaderDefaultPID = "/var/run/nats/nats.pid"

// CheckNATSReload checks that a renewed NATS certificate is loaded without
// a restart:
//
//   - the NATS pods share their process namespace, so that the reloader's
//     signal reaches nats-server in the other container;
//   - one reloader container runs beside the server, declares no port
//     (every listener authenticates, and it needs none) and watches (-config)
//     the server's configuration file, each file it includes, and every TLS
//     file (cert_file, key_file, ca_file) it names: the same files, from
//     the same volumes, as the server reads them;
//   - nats.conf sets pid_file, on an emptyDir both containers mount, and
//     the reloader reads the pid there (-pid);
//   - no other container of the pod runs as the server's user: with the
//     process namespace shared, one that did could read the server's key
//     through /proc.
func CheckNATSReload(w *World) []string {
	o, ok := w.get("StatefulSet", NATSNamespace, "nats")
	if !ok {
		return nil // reported by CheckPlatform
	}
	spec := o.Typed.(*appsv1.StatefulSet).Spec.Template.Spec
	var v []string
	if !isTrue(spec.ShareProcessNamespace) {
		v = append(v, fmt.Sprintf("%s: shareProcessNamespace is not true: the reloader's signal cannot reach nats-server, and a renewed certificate is not loaded", o))
	}
	var server, reloader *corev1.Container
	for i, c := range spec.Containers {
		switch imageName(c.Image) {
		case "nats":
			server = &spec.Containers[i]
		case ReloaderImage:
			if reloader != nil {
				v = append(v, fmt.Sprintf("%s: more than one reloader container", o))
			}
			reloader = &spec.Containers[i]
		}
	}
	if server == nil {
		return append(v, fmt.Sprintf("%s: no nats-server container (image nats)", o))
	}
	if reloader == nil {
		return append(v, fmt.Sprintf("%s: no reloader container (image %s): nats-server reads its certificate only at start, and keeps a renewed one's predecessor until it expires", o, ReloaderImage))
	}
	at := fmt.Sprintf("%s container %s", o, reloader.Name)
	if len(reloader.Ports) > 0 {
		v = append(v, at+": declares a port: the reloader serves nothing, and every listener must authenticate")
	}
	confFile := flagValues(append(append([]string{}, server.Command...), server.Args...), "config", "c")
	if len(confFile) != 1 {
		return append(v, fmt.Sprintf("%s container %s: no single --config file in its args", o, server.Name))
	}
	conf, msg := natsConf(w, spec, *server, confFile[0])
	if msg != "" {
		return append(v, fmt.Sprintf("%s container %s: %s", o, server.Name, msg))
	}
	// What the reloader watches, as volume and key.
	watched := map[string]bool{}
	for _, f := range flagValues(reloader.Args, "config", "c") {
		if src, ok := resolveFile(spec, *reloader, f); ok {
			watched[src.Volume.Name+"/"+src.Key] = true
		}
	}
	files := []string{path.Clean(confFile[0])}
	for _, inc := range confValues(conf, "include") {
		if !path.IsAbs(inc) {
			inc = path.Join(path.Dir(confFile[0]), inc)
		}
		files = append(files, inc)
	}
	for _, k := range []string{"cert_file", "key_file", "ca_file"} {
		files = append(files, confValues(conf, k)...)
	}
	seen := map[string]bool{}
	for _, f := range files {
		if seen[f] {
			continue
		}
		seen[f] = true
		src, ok := resolveFile(spec, *server, f)
		if !ok {
			v = append(v, fmt.Sprintf("%s: nats.conf names %s, which is in no volume mount of container %s", o, f, server.Name))
			continue
		}
		if !watched[src.Volume.Name+"/"+src.Key] {
			v = append(v, fmt.Sprintf("%s: does not watch %s (%s of volume %s, as container %s reads it): a change to it is not loaded until a restart",
				at, f, src.Key, src.Volume.Name, server.Name))
		}
	}
	// The pid file: written by the server, read by the reloader, on a
	// volume both mount.
	pids := confValues(conf, "pid_file")
	if len(pids) == 0 {
		v = append(v, fmt.Sprintf("%s: nats.conf sets no pid_file: the reloader cannot find the server to signal", o))
	} else {
		pid := pids[len(pids)-1]
		src, ok := resolveFile(spec, *server, pid)
		switch {
		case !ok:
			v = append(v, fmt.Sprintf("%s: nats.conf's pid_file %s is in no volume mount of container %s: the reloader cannot read it", o, pid, server.Name))
		case src.Volume.EmptyDir == nil || src.Mount.ReadOnly:
			v = append(v, fmt.Sprintf("%s: nats.conf's pid_file %s is not on a writable emptyDir (volume %s)", o, pid, src.Volume.Name))
		default:
			rpid := reloaderDefaultPID
			if p := flagValues(reloader.Args, "pid", "P"); len(p) > 0 {
				rpid = p[len(p)-1]
			}
			rsrc, ok := resolveFile(spec, *reloader, rpid)
			if !ok || rsrc.Volume.Name != src.Volume.Name || rsrc.Key != src.Key {
				v = append(v, fmt.Sprintf("%s: reads the pid from %s, not from nats.conf's pid_file %s (%s of volume %s): it signals no server",
					at, rpid, pid, src.Key, src.Volume.Name))
			}
		}
	}
	// With the process namespace shared, only the reloader may be the
	// server's user.
	uid := func(c corev1.Container) (int64, bool) {
		if c.SecurityContext != nil && c.SecurityContext.RunAsUser != nil {
			return *c.SecurityContext.RunAsUser, true
		}
		if spec.SecurityContext != nil && spec.SecurityContext.RunAsUser != nil {
			return *spec.SecurityContext.RunAsUser, true
		}
		return 0, false
	}
	if serverUID, ok := uid(*server); !ok {
		v = append(v, fmt.Sprintf("%s container %s: no runAsUser: with the process namespace shared, the other containers' users must differ from it", o, server.Name))
	} else if isTrue(spec.ShareProcessNamespace) {
		for _, c := range append(append([]corev1.Container{}, spec.InitContainers...), spec.Containers...) {
			if c.Name == server.Name || c.Name == reloader.Name {
				continue
			}
			if u, ok := uid(c); !ok || u == serverUID {
				v = append(v, fmt.Sprintf("%s container %s: may run as the server's user (%d): with the process namespace shared, it could read the server's key through /proc",
					o, c.Name, serverUID))
			}
		}
	}
	return v
}

// flagValues are the values of flag name (or its short form) in args, in
// Go's flag syntax: -name v, --name v, -name=v.
func flagValues(args []string, names ...string) []string {
	var out []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		if !strings.HasPrefix(a, "-") {
			continue
		}
		k, val, hasVal := strings.Cut(strings.TrimLeft(a, "-"), "=")
		for _, n := range names {
			if k != n {
				continue
			}
			if !hasVal && i+1 < len(args) {
				i++
				val, hasVal = args[i], true
			}
			if hasVal {
				out = append(out, val)
			}
		}
	}
	return out
}

// natsConf finds the server's configuration file in the ConfigMap it is
// mounted from.
func natsConf(w *World, spec corev1.PodSpec, c corev1.Container, file string) (string, string) {
	src, ok := resolveFile(spec, c, file)
	if !ok || src.Volume.ConfigMap == nil {
		return "", fmt.Sprintf("its config %s is in no ConfigMap volume", file)
	}
	cm, ok := w.get("ConfigMap", NATSNamespace, src.Volume.ConfigMap.Name)
	if !ok {
		return "", fmt.Sprintf("its config %s is in ConfigMap %s, which is not rendered", file, src.Volume.ConfigMap.Name)
	}
	conf, ok := cm.Typed.(*corev1.ConfigMap).Data[src.Key]
	if !ok {
		return "", fmt.Sprintf("its config %s is key %s, which ConfigMap %s does not hold", file, src.Key, cm.Name)
	}
	return conf, ""
}

// confValue matches one setting of a NATS configuration file: KEY: VALUE,
// KEY = VALUE or KEY VALUE, the value maybe quoted, at the start of a line.
var confValue = regexp.MustCompile(`(?m)^\s*([a-z_]+)\s*[:=]?\s*"?([^"\s#;,}]+)"?`)

// confValues are the values of setting key in a NATS configuration, at
// any depth, in order.
func confValues(conf, key string) []string {
	var out []string
	for _, m := range confValue.FindAllStringSubmatch(conf, -1) {
		if m[1] == key {
			out = append(out, m[2])
		}
	}
	return out
}
