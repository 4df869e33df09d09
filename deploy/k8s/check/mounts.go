package check

import (
	"fmt"
	"path"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// What a container reads from its volumes: which Secret or ConfigMap key a
// file path a setting names really is, as kubelet would lay it out.

// envOf is a container's literal env value, the last entry of that name.
func envOf(c corev1.Container, name string) string {
	val := ""
	for _, e := range c.Env {
		if e.Name == name {
			val = e.Value
		}
	}
	return val
}

// fileSource is where a file a container reads comes from.
type fileSource struct {
	Volume corev1.Volume
	Mount  corev1.VolumeMount
	// Key is the file's key in the volume's Secret or ConfigMap.
	Key string
}

// resolveFile finds the volume, mount and key that file lies in, taking
// the deepest mount that holds it, as the container sees it.
func resolveFile(spec corev1.PodSpec, c corev1.Container, file string) (fileSource, bool) {
	file = path.Clean(file)
	var best fileSource
	found := false
	for _, m := range c.VolumeMounts {
		rel, ok := "", false
		switch {
		case m.SubPath != "" && file == path.Clean(m.MountPath):
			rel, ok = m.SubPath, true
		case m.SubPath == "":
			rel, ok = strings.CutPrefix(file, strings.TrimSuffix(path.Clean(m.MountPath), "/")+"/")
		}
		if !ok || rel == "" || found && len(m.MountPath) <= len(best.Mount.MountPath) {
			continue
		}
		for _, vol := range spec.Volumes {
			if vol.Name == m.Name {
				best, found = fileSource{Volume: vol, Mount: m, Key: itemKey(vol, path.Clean(rel))}, true
			}
		}
	}
	return best, found
}

// itemKey maps a path in a Secret or ConfigMap volume to its key, through
// the volume's items when it lists them.
func itemKey(vol corev1.Volume, rel string) string {
	var items []corev1.KeyToPath
	switch {
	case vol.Secret != nil:
		items = vol.Secret.Items
	case vol.ConfigMap != nil:
		items = vol.ConfigMap.Items
	}
	for _, it := range items {
		if path.Clean(it.Path) == rel {
			return it.Key
		}
	}
	if len(items) > 0 {
		return "" // listed items only: nothing else is in the volume
	}
	return rel
}

// mountedFile checks that a container's env names a file in a rendered
// object of kind ("Secret" or "ConfigMap") in ns, and says what is wrong
// if not.
func mountedFile(w *World, ns string, spec corev1.PodSpec, c corev1.Container, env, kind string) string {
	file := envOf(c, env)
	if file == "" {
		return "no " + env
	}
	src, ok := resolveFile(spec, c, file)
	if !ok {
		return fmt.Sprintf("%s %s is in no volume mount", env, file)
	}
	var data map[string]string
	var name string
	switch {
	case kind == "Secret" && src.Volume.Secret != nil:
		name = src.Volume.Secret.SecretName
		if o, ok := w.get("Secret", ns, name); ok {
			data = secretData(o.Typed.(*corev1.Secret))
		}
	case kind == "ConfigMap" && src.Volume.ConfigMap != nil:
		name = src.Volume.ConfigMap.Name
		if o, ok := w.get("ConfigMap", ns, name); ok {
			data = o.Typed.(*corev1.ConfigMap).Data
		}
	default:
		return fmt.Sprintf("%s %s is not in a %s volume", env, file, kind)
	}
	if data == nil {
		return fmt.Sprintf("%s %s is in %s %s, which is not rendered", env, file, kind, name)
	}
	if _, ok := data[src.Key]; !ok {
		return fmt.Sprintf("%s %s is key %q, which %s %s does not hold", env, file, src.Key, kind, name)
	}
	return ""
}

// secretData is the keys of a Secret, as a pod would see them.
func secretData(s *corev1.Secret) map[string]string {
	out := make(map[string]string, len(s.Data)+len(s.StringData))
	for k, b := range s.Data {
		out[k] = string(b)
	}
	for k, x := range s.StringData {
		out[k] = x
	}
	return out
}

func container(spec corev1.PodSpec, name string) (corev1.Container, bool) {
	for _, c := range spec.Containers {
		if c.Name == name {
			return c, true
		}
	}
	return corev1.Container{}, false
}
