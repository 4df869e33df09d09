package check

import (
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
)

// withCallbackPolicy returns a copy of objs whose policy cell-callbacks in
// ns is the one written as YAML (its spec), or none for "".
func withCallbackPolicy(t *testing.T, objs []Object, ns, spec string) []Object {
	t.Helper()
	out := without(objs, "NetworkPolicy", ns, "cell-callbacks")
	if len(out) != len(objs)-1 {
		t.Fatalf("no NetworkPolicy %s/cell-callbacks rendered", ns)
	}
	if spec == "" {
		return out
	}
	return append(out, policy(t, ns, "metadata: {name: cell-callbacks}\nspec:\n  podSelector: {matchLabels: {app.kubernetes.io/name: cell}}\n  policyTypes: [Egress]\n"+spec))
}

// The committed policy's peers, for cases that change one part of it.
const (
	v4Internet = "{ipBlock: {cidr: 0.0.0.0/0, except: [10.0.0.0/8, 172.16.0.0/12, 192.168.0.0/16, 100.64.0.0/10, 169.254.0.0/16, 127.0.0.0/8]}}"
	v6Internet = "{ipBlock: {cidr: '::/0', except: ['fc00::/7', 'fe80::/10', '::1/128']}}"
)

// TestCallbackChecksCatch opens the cells' callback egress too far, and
// shuts it, one way at a time, and expects each to be reported; the
// committed policy written out again must pass.
func TestCallbackChecksCatch(t *testing.T) {
	base := renderAll(t, deployDir)
	cases := []brokenCase{
		{"callbacks shut out", withCallbackPolicy(t, base, "cell-a", ""), []string{
			"cell-a/cell cannot reach public addresses 4000::/2, 8000::/2, 2000::/3 (", "on 443/TCP: partners' callback endpoints there time out"}},
		{"IPv4 only", withCallbackPolicy(t, base, "cell-b", "  egress: [{to: ["+v4Internet+"], ports: [{port: 443}]}]\n"), []string{
			"cell-b/cell cannot reach public addresses 4000::/2, 8000::/2, 2000::/3 ("}},
		{"IPv6 only", withCallbackPolicy(t, base, "cell-b", "  egress: [{to: ["+v6Internet+"], ports: [{port: 443}]}]\n"), []string{
			"cell-b/cell cannot reach public addresses 32.0.0.0/3, 64.0.0.0/3, 128.0.0.0/3 ("}},
		{"some partners only", withCallbackPolicy(t, base, "cell-c", "  egress: [{to: [{ipBlock: {cidr: 203.0.113.0/24}}], ports: [{port: 443}]}]\n"), []string{
			"cell-c/cell cannot reach public addresses 4000::/2"}},
		{"callbacks over UDP", withCallbackPolicy(t, base, "cell-a", "  egress: [{to: ["+v4Internet+", "+v6Internet+"], ports: [{protocol: UDP, port: 443}]}]\n"), []string{
			"cell-a/cell cannot reach public addresses", "cell-a/cell may send to public addresses 4000::/2, 8000::/2, 2000::/3 (",
			"on 443/UDP: a cell sends callbacks to 443/TCP only"}},
		{"the port by name", withCallbackPolicy(t, base, "cell-a", "  egress: [{to: ["+v4Internet+", "+v6Internet+"], ports: [{port: https}]}]\n"), []string{
			"cell-a/cell cannot reach public addresses"}},
		{"every port", withCallbackPolicy(t, base, "cell-b", "  egress: [{to: ["+v4Internet+", "+v6Internet+"]}]\n"), []string{
			"cell-b/cell may send to public addresses 4000::/2, 8000::/2, 2000::/3 (", "on 80/TCP: a cell sends callbacks to 443/TCP only",
			"on 53/UDP: a cell sends callbacks", "on 22/TCP: a cell sends callbacks", "on 8443/TCP: a cell sends callbacks"}},
		{"a port range", withCallbackPolicy(t, base, "cell-b", "  egress: [{to: ["+v4Internet+"], ports: [{port: 443, endPort: 8443}]}]\n"), []string{
			"cell-b/cell may send to public addresses 32.0.0.0/3, 64.0.0.0/3, 128.0.0.0/3 (", "on 8443/TCP: a cell sends callbacks to 443/TCP only"}},
		{"every address on 443", withCallbackPolicy(t, base, "cell-c", "  egress: [{to: [{ipBlock: {cidr: 0.0.0.0/0}}, {ipBlock: {cidr: '::/0'}}], ports: [{port: 443}]}]\n"), []string{
			"cell-c/cell may send to 10.0.0.0/8 (private) on 443/TCP: a callback URL could reach the cluster's or the cloud's own addresses",
			"cell-c/cell may send to 169.254.0.0/16 (link-local, the cloud metadata endpoint 169.254.169.254) on 443/TCP",
			"cell-c/cell may send to 127.0.0.0/8 (loopback) on 443/TCP",
			"cell-c/cell may send to fe80::/10 (IPv6 link-local) on 443/TCP",
			// An ipBlock over pod ranges reaches pods: the boundary sees it too.
			"cell-c/cell may send to kube-system/kube-dns on 443/TCP", "cell-c/cell may send to cell-a/cell on 443/TCP"}},
		{"every address on 443, as the API server's rules are", withCallbackPolicy(t, base, "cell-a", "  egress: [{ports: [{port: 443}]}]\n"), []string{
			"cell-a/cell may send to 100.64.0.0/10 (shared address space, pods and nodes on some clouds) on 443/TCP",
			"cell-a/cell may send to ::1/128 (IPv6 loopback) on 443/TCP", "cell-a/cell may send to cellpay-gtr/gtr on 443/TCP"}},
		{"the metadata endpoint left open", withCallbackPolicy(t, base, "cell-a", "  egress: [{to: [{ipBlock: {cidr: 0.0.0.0/0, except: [10.0.0.0/8, 172.16.0.0/12, 192.168.0.0/16, 100.64.0.0/10, 127.0.0.0/8]}}, "+v6Internet+"], ports: [{port: 443}]}]\n"), []string{
			"cell-a/cell may send to 169.254.0.0/16 (link-local, the cloud metadata endpoint 169.254.169.254) on 443/TCP"}},
		{"a private range excepted too narrowly", withCallbackPolicy(t, base, "cell-b", "  egress: [{to: [{ipBlock: {cidr: 0.0.0.0/0, except: [10.0.0.0/8, 172.16.0.0/16, 192.168.0.0/16, 100.64.0.0/10, 169.254.0.0/16, 127.0.0.0/8]}}, "+v6Internet+"], ports: [{port: 443}]}]\n"), []string{
			"cell-b/cell may send to 172.24.0.0/13, 172.20.0.0/14, 172.18.0.0/15 (4 ranges in all) (private) on 443/TCP",
			"cell-b/cell may send to cell-a/cell on 443/TCP"}},
		{"IPv6 unfenced", withCallbackPolicy(t, base, "cell-c", "  egress: [{to: ["+v4Internet+", {ipBlock: {cidr: '::/0'}}], ports: [{port: 443}]}]\n"), []string{
			"cell-c/cell may send to fc00::/7 (IPv6 unique local, pods and the metadata endpoint fd00:ec2::254 on some clouds) on 443/TCP",
			"cell-c/cell may send to fe80::/10 (IPv6 link-local) on 443/TCP", "cell-c/cell may send to cellpay-nats/nats on 443/TCP"}},
		{"a second policy opens more", append(base, policy(t, "cell-b", "metadata: {name: more}\nspec:\n  podSelector: {matchLabels: {app.kubernetes.io/name: cell}}\n"+
			"  policyTypes: [Egress]\n  egress: [{to: [{ipBlock: {cidr: 169.254.169.254/32}}], ports: [{port: 80}]}]\n")), []string{
			"cell-b/cell may send to 169.254.169.254/32 (link-local, the cloud metadata endpoint 169.254.169.254) on 80/TCP"}},
	}
	checkBroken(t, cases)
	// The committed policy, written out again, passes: the cases above
	// change only what they say.
	same := withCallbackPolicy(t, base, "cell-a", "  egress: [{to: ["+v4Internet+", "+v6Internet+"], ports: [{protocol: TCP, port: 443}]}]\n")
	for _, v := range Check(same) {
		t.Error(v)
	}
}

// TestCallbackScheduleCheck holds the cells to the production retry
// schedule: unset, compressed, malformed or unreadable is reported, and
// callbacks turned off; the same durations spelt otherwise pass.
func TestCallbackScheduleCheck(t *testing.T) {
	base := renderAll(t, deployDir)
	cell := func(change func(c *corev1.Container)) []Object {
		return withObject(t, base, "Deployment", "cell-b", "cell", func(d *appsv1.Deployment) { change(containerOf(d)) })
	}
	schedule := func(v string) []Object {
		return cell(func(c *corev1.Container) { setEnv(c, corev1.EnvVar{Name: "CELL_CALLBACK_SCHEDULE", Value: v}) })
	}
	for _, tt := range []struct {
		name string
		objs []Object
		want string // "" for no violation about callbacks
	}{
		{"unset", cell(func(c *corev1.Container) { dropEnv(c, "CELL_CALLBACK_SCHEDULE") }),
			"cell-b: cell: CELL_CALLBACK_SCHEDULE is not set: the cell retries callbacks on its compressed local schedule (about 18 minutes), want 0s,5s,5m0s,30m0s,2h0m0s,5h0m0s,10h0m0s,10h0m0s (callback.SvixSchedule)"},
		{"the local schedule", schedule("0s,1s,5s,15s,1m0s,2m0s,5m0s,10m0s"),
			`cell-b: cell: CELL_CALLBACK_SCHEDULE is "0s,1s,5s,15s,1m0s,2m0s,5m0s,10m0s", want 0s,5s,5m0s,30m0s,2h0m0s,5h0m0s,10h0m0s,10h0m0s`},
		{"one attempt short", schedule("0s,5s,5m0s,30m0s,2h0m0s,5h0m0s,10h0m0s"),
			`cell-b: cell: CELL_CALLBACK_SCHEDULE is "0s,5s,5m0s,30m0s,2h0m0s,5h0m0s,10h0m0s", want`},
		{"not durations", schedule("0,5,300"), `cell-b: cell: CELL_CALLBACK_SCHEDULE "0,5,300": step "5" is not a duration >= 0`},
		{"from a ConfigMap", cell(func(c *corev1.Container) {
			setEnv(c, corev1.EnvVar{Name: "CELL_CALLBACK_SCHEDULE", ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{
				LocalObjectReference: corev1.LocalObjectReference{Name: "x"}, Key: "schedule"}}})
		}), "cell-b: cell: CELL_CALLBACK_SCHEDULE comes from valueFrom, which the checks cannot read"},
		{"callbacks off", cell(func(c *corev1.Container) { setEnv(c, corev1.EnvVar{Name: "CELL_CALLBACKS_OFF", Value: "1"}) }),
			`cell-b: cell: CELL_CALLBACKS_OFF is "1": no callback is delivered`},
		{"the same durations spelt otherwise", schedule("0s, 5s, 5m, 30m, 2h, 5h, 10h, 10h"), ""},
		{"callbacks explicitly on", cell(func(c *corev1.Container) { setEnv(c, corev1.EnvVar{Name: "CELL_CALLBACKS_OFF", Value: "0"}) }), ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var got []string
			for _, v := range Check(tt.objs) {
				if strings.Contains(v, "CALLBACK") {
					got = append(got, v)
				}
			}
			switch {
			case tt.want == "" && len(got) > 0:
				t.Errorf("violations %q, want none", got)
			case tt.want != "" && !strings.Contains(strings.Join(got, "\n"), tt.want):
				t.Errorf("no violation %q; got %q", tt.want, got)
			}
		})
	}
}
