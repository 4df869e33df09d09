package check

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// TestResolveFile pins how a file path maps to a volume key: by mount
// prefix (the deepest wins), subPath, and a volume's items.
func TestResolveFile(t *testing.T) {
	secret := func(name string, items ...corev1.KeyToPath) corev1.VolumeSource {
		return corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: name, Items: items}}
	}
	spec := corev1.PodSpec{Volumes: []corev1.Volume{
		{Name: "etc", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
		{Name: "tls", VolumeSource: secret("tls")},
		{Name: "mapped", VolumeSource: secret("mapped", corev1.KeyToPath{Key: "tls.crt", Path: "server/cert.pem"})},
		{Name: "one", VolumeSource: secret("one")},
	}}
	c := corev1.Container{VolumeMounts: []corev1.VolumeMount{
		{Name: "etc", MountPath: "/etc/cellpay"},
		{Name: "tls", MountPath: "/etc/cellpay/tls/"},
		{Name: "mapped", MountPath: "/etc/mapped"},
		{Name: "one", MountPath: "/etc/one/token", SubPath: "token"},
	}}
	for _, tc := range []struct {
		file, volume, key string
		ok                bool
	}{
		{"/etc/cellpay/tls/tls.crt", "tls", "tls.crt", true},
		{"/etc/cellpay/tls/../tls/tls.key", "tls", "tls.key", true},
		{"/etc/cellpay/gtr.yaml", "etc", "gtr.yaml", true},
		{"/etc/mapped/server/cert.pem", "mapped", "tls.crt", true},
		{"/etc/mapped/tls.crt", "mapped", "", true}, // not listed in items: absent
		{"/etc/one/token", "one", "token", true},
		{"/etc/cellpay", "", "", false},
		{"/var/lib/x", "", "", false},
	} {
		src, ok := resolveFile(spec, c, tc.file)
		if ok != tc.ok || ok && (src.Volume.Name != tc.volume || src.Key != tc.key) {
			t.Errorf("%s: volume %q key %q ok %v, want %q %q %v", tc.file, src.Volume.Name, src.Key, ok, tc.volume, tc.key, tc.ok)
		}
	}
}
