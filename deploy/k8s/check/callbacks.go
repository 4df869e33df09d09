package check

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
)

// CallbackPort is where partners' callback endpoints listen: the cells'
// notifier POSTs to https:// URLs (cmd/cell/internal/notifier), at the
// default HTTPS port.
const CallbackPort = 443

// ProductionCallbackSchedule is callback.SvixSchedule.String()
// (cmd/cell/internal/callback): Svix's retry schedule, eight attempts over
// about 28 hours, which production cells run. Pinned here because this
// module does not depend on the main one (and could not import an
// internal package of cmd/cell); the main module's callback tests pin the
// same text, so a change there is a change here.
const ProductionCallbackSchedule = "0s,5s,5m0s,30m0s,2h0m0s,5h0m0s,10h0m0s,10h0m0s"

// nonPublic are the addresses a callback must never reach, whatever URL a
// partner's settings name: the cluster's own (pods, Services, nodes) and
// the cloud's (its metadata endpoint). The cells' policy cell-callbacks
// excepts each from the Internet it opens; change both together.
var nonPublic = []struct {
	prefix netip.Prefix
	what   string
}{
	{netip.MustParsePrefix("10.0.0.0/8"), "private"},
	{netip.MustParsePrefix("172.16.0.0/12"), "private"},
	{netip.MustParsePrefix("192.168.0.0/16"), "private"},
	{netip.MustParsePrefix("100.64.0.0/10"), "shared address space, pods and nodes on some clouds"},
	{netip.MustParsePrefix("169.254.0.0/16"), "link-local, the cloud metadata endpoint 169.254.169.254"},
	{netip.MustParsePrefix("127.0.0.0/8"), "loopback"},
	{netip.MustParsePrefix("fc00::/7"), "IPv6 unique local, pods and the metadata endpoint fd00:ec2::254 on some clouds"},
	{netip.MustParsePrefix("fe80::/10"), "IPv6 link-local"},
	{netip.MustParsePrefix("::1/128"), "IPv6 loopback"},
}

// public is every address but nonPublic, IPv4 and IPv6: where partners'
// endpoints may be.
var public = func() addrSet {
	v4 := ipRange{cidr: netip.MustParsePrefix("0.0.0.0/0")}
	v6 := ipRange{cidr: netip.MustParsePrefix("::/0")}
	for _, n := range nonPublic {
		if n.prefix.Addr().Is4() {
			v4.except = append(v4.except, n.prefix)
		} else {
			v6.except = append(v6.except, n.prefix)
		}
	}
	return addrSet{v4, v6}
}()

// calloutTargets are the ports tried for addresses outside the cluster:
// the callback port, commonPorts, and the usual other HTTPS ports.
var calloutTargets = func() []Target {
	out := []Target{{CallbackPort, corev1.ProtocolTCP}, {CallbackPort, corev1.ProtocolUDP}, {8443, corev1.ProtocolTCP}, {1, corev1.ProtocolTCP}}
	for _, t := range commonPorts {
		if !slices.Contains(out, t) {
			out = append(out, t)
		}
	}
	return out
}()

// CheckCallbacks checks that every cell delivers its callbacks, and no
// further:
//
//   - each cell pod may send to every public address (every address but
//     nonPublic, IPv4 and IPv6) on 443/TCP, where partners' endpoints are;
//   - to no nonPublic address on any port tried (calloutTargets), by an
//     ipBlock or a rule with no peers: a callback URL naming a pod, a
//     Service, a node or the cloud's metadata endpoint goes nowhere
//     (CheckBoundary proves the same for every pod of the cluster);
//   - to no public address on any other port;
//   - the cell runs the production retry schedule (CELL_CALLBACK_SCHEDULE,
//     ProductionCallbackSchedule), and callbacks are not off.
func CheckCallbacks(w *World) []string {
	var v []string
	for _, ns := range w.Cells {
		v = append(v, callbackSchedule(w, ns)...)
		cell, ok := w.pod(ns, "cell")
		if !ok {
			continue // reported by CheckBoundary
		}
		for _, t := range calloutTargets {
			allowed := w.Net.egressAddrs(cell, t.Port, t.Proto)
			if t == (Target{CallbackPort, corev1.ProtocolTCP}) {
				if gaps := missing(public, allowed, 0); len(gaps) > 0 {
					v = append(v, fmt.Sprintf("%s cannot reach public addresses %s on %s: partners' callback endpoints there time out", cell, some(gaps), t))
				}
			} else if leaks := overlap(public, allowed, 0); len(leaks) > 0 {
				v = append(v, fmt.Sprintf("%s may send to public addresses %s on %s: a cell sends callbacks to %d/TCP only", cell, some(leaks), t, CallbackPort))
			}
			for _, n := range nonPublic {
				if leaks := overlap(prefixes(n.prefix), allowed, 0); len(leaks) > 0 {
					v = append(v, fmt.Sprintf("%s may send to %s (%s) on %s: a callback URL could reach the cluster's or the cloud's own addresses", cell, some(leaks), n.what, t))
				}
			}
		}
	}
	return v
}

// some names the three largest of ps, and how many there are in all.
func some(ps []netip.Prefix) string {
	ps = slices.Clone(ps)
	size := func(p netip.Prefix) int { return p.Addr().BitLen() - p.Bits() } // log2 of its addresses
	slices.SortStableFunc(ps, func(a, b netip.Prefix) int { return size(b) - size(a) })
	var names []string
	for _, p := range ps[:min(len(ps), 3)] {
		names = append(names, p.String())
	}
	s := strings.Join(names, ", ")
	if len(ps) > 3 {
		s += fmt.Sprintf(" (%d ranges in all)", len(ps))
	}
	return s
}

// callbackSchedule holds cell ns's container to the production retry
// schedule, with callbacks on.
func callbackSchedule(w *World, ns string) []string {
	dep, ok := w.get("Deployment", ns, "cell")
	if !ok {
		return nil // reported by CheckCells
	}
	spec := dep.Typed.(*appsv1.Deployment).Spec.Template.Spec
	c, ok := container(spec, "cell")
	if !ok {
		return nil // reported by CheckDatabase
	}
	var v []string
	if off := envValue(spec, "cell", "CELL_CALLBACKS_OFF"); off != "" && off != "0" {
		v = append(v, fmt.Sprintf("%s: cell: CELL_CALLBACKS_OFF is %q: no callback is delivered", ns, off))
	}
	want, _ := parseSchedule(ProductionCallbackSchedule)
	switch sched := envValue(spec, "cell", "CELL_CALLBACK_SCHEDULE"); {
	case !hasEnv(c, "CELL_CALLBACK_SCHEDULE"):
		v = append(v, fmt.Sprintf("%s: cell: CELL_CALLBACK_SCHEDULE is not set: the cell retries callbacks on its compressed local schedule (about 18 minutes), want %s (callback.SvixSchedule)", ns, ProductionCallbackSchedule))
	case sched == "valueFrom" || strings.HasPrefix(sched, "fieldRef:"):
		v = append(v, fmt.Sprintf("%s: cell: CELL_CALLBACK_SCHEDULE comes from valueFrom, which the checks cannot read: set it to %s", ns, ProductionCallbackSchedule))
	default:
		got, err := parseSchedule(sched)
		switch {
		case err != nil:
			v = append(v, fmt.Sprintf("%s: cell: CELL_CALLBACK_SCHEDULE %q: %v", ns, sched, err))
		case !slices.Equal(got, want):
			v = append(v, fmt.Sprintf("%s: cell: CELL_CALLBACK_SCHEDULE is %q, want %s (callback.SvixSchedule)", ns, sched, ProductionCallbackSchedule))
		}
	}
	return v
}

func hasEnv(c corev1.Container, name string) bool {
	return slices.ContainsFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == name })
}

// parseSchedule reads a schedule as the cell does (callback.ParseSchedule):
// comma-separated Go durations, none negative.
func parseSchedule(s string) ([]time.Duration, error) {
	var out []time.Duration
	for part := range strings.SplitSeq(s, ",") {
		d, err := time.ParseDuration(strings.TrimSpace(part))
		if err != nil || d < 0 {
			return nil, fmt.Errorf("step %q is not a duration >= 0", part)
		}
		out = append(out, d)
	}
	return out, nil
}
