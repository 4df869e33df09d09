package check

import (
	"fmt"
	"net/netip"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// Pod is what the evaluator knows of a pod: where it is, its labels and its
// container ports (for named ports). One Pod stands for all replicas of a
// workload, since they share labels.
type Pod struct {
	Namespace string
	Name      string
	Labels    map[string]string
	Ports     []corev1.ContainerPort
}

func (p Pod) String() string { return p.Namespace + "/" + p.Name }

// Network answers "can pod X reach pod Y on port P" under the Kubernetes
// NetworkPolicy semantics (networking.k8s.io/v1):
//
//   - A pod is isolated for ingress (egress) when a policy in its namespace
//     selects it and has Ingress (Egress) among its policyTypes; an isolated
//     pod admits only what some such policy's rules allow, the union of them.
//   - A connection needs both: the source's egress allows it and the
//     destination's ingress allows it.
//   - A peer with podSelector alone means pods of the policy's namespace; with
//     namespaceSelector alone, all pods of the matching namespaces; with both,
//     the pods matching both. An empty from/to list means everyone, and an
//     empty ports list every port.
//   - An ipBlock peer cannot be decided statically for pods, whose addresses
//     are not known: it matches every pod when the block (its cidr but its
//     excepts) holds any address of PodCIDRs, so a leak through one is
//     reported, not hidden.
//   - Addresses outside the cluster (egressAddrs) are reached by ipBlock
//     peers, and by rules with no peers, never by a selector.
//
// Traffic from the node (kubelet probes) is out of scope, as in most CNIs.
type Network struct {
	// Namespaces maps a namespace to its labels. The evaluator adds
	// kubernetes.io/metadata.name itself, as the API server does.
	Namespaces map[string]map[string]string
	Policies   []networkingv1.NetworkPolicy
	// PodCIDRs are the ranges pod addresses may come from; nil means every
	// private range.
	PodCIDRs []netip.Prefix
}

var privateRanges = []netip.Prefix{
	netip.MustParsePrefix("10.0.0.0/8"),
	netip.MustParsePrefix("172.16.0.0/12"),
	netip.MustParsePrefix("192.168.0.0/16"),
	netip.MustParsePrefix("100.64.0.0/10"),
	netip.MustParsePrefix("fc00::/7"),
}

// Allowed reports whether src may open a connection to dst on port/proto.
func (n *Network) Allowed(src, dst Pod, port int32, proto corev1.Protocol) bool {
	return n.egressAllows(src, dst, port, proto) && n.ingressAllows(src, dst, port, proto)
}

func (n *Network) ingressAllows(src, dst Pod, port int32, proto corev1.Protocol) bool {
	isolated := false
	for i := range n.Policies {
		p := &n.Policies[i]
		if p.Namespace != dst.Namespace || !hasType(p, networkingv1.PolicyTypeIngress) || !selects(p.Spec.PodSelector, dst.Labels) {
			continue
		}
		isolated = true
		for _, r := range p.Spec.Ingress {
			if n.anyPeer(p.Namespace, r.From, src) && portsMatch(r.Ports, dst, port, proto) {
				return true
			}
		}
	}
	return !isolated
}

func (n *Network) egressAllows(src, dst Pod, port int32, proto corev1.Protocol) bool {
	isolated := false
	for i := range n.Policies {
		p := &n.Policies[i]
		if p.Namespace != src.Namespace || !hasType(p, networkingv1.PolicyTypeEgress) || !selects(p.Spec.PodSelector, src.Labels) {
			continue
		}
		isolated = true
		for _, r := range p.Spec.Egress {
			if n.anyPeer(p.Namespace, r.To, dst) && portsMatch(r.Ports, dst, port, proto) {
				return true
			}
		}
	}
	return !isolated
}

// hasType applies the API's defaulting of policyTypes: Ingress always, Egress
// when the policy has egress rules.
func hasType(p *networkingv1.NetworkPolicy, t networkingv1.PolicyType) bool {
	if len(p.Spec.PolicyTypes) == 0 {
		return t == networkingv1.PolicyTypeIngress || (t == networkingv1.PolicyTypeEgress && len(p.Spec.Egress) > 0)
	}
	for _, pt := range p.Spec.PolicyTypes {
		if pt == t {
			return true
		}
	}
	return false
}

func selects(sel metav1.LabelSelector, l map[string]string) bool {
	s, err := metav1.LabelSelectorAsSelector(&sel)
	if err != nil {
		// An invalid selector is rejected by the API server; treat it as
		// matching everything so that it can only make a check fail.
		return true
	}
	return s.Matches(labels.Set(l))
}

func (n *Network) anyPeer(policyNS string, peers []networkingv1.NetworkPolicyPeer, pod Pod) bool {
	if len(peers) == 0 {
		return true
	}
	for _, peer := range peers {
		if n.peerMatches(policyNS, peer, pod) {
			return true
		}
	}
	return false
}

func (n *Network) peerMatches(policyNS string, peer networkingv1.NetworkPolicyPeer, pod Pod) bool {
	if peer.IPBlock != nil {
		return n.blockMayHoldPods(peer.IPBlock)
	}
	if peer.NamespaceSelector == nil {
		if pod.Namespace != policyNS {
			return false
		}
	} else if !selects(*peer.NamespaceSelector, n.namespaceLabels(pod.Namespace)) {
		return false
	}
	if peer.PodSelector == nil {
		return true
	}
	return selects(*peer.PodSelector, pod.Labels)
}

func (n *Network) namespaceLabels(ns string) map[string]string {
	l := map[string]string{}
	for k, v := range n.Namespaces[ns] {
		l[k] = v
	}
	l["kubernetes.io/metadata.name"] = ns
	return l
}

// blockMayHoldPods says whether b holds an address of PodCIDRs: an
// except that covers every pod range keeps the block off pods.
func (n *Network) blockMayHoldPods(b *networkingv1.IPBlock) bool {
	ranges := n.PodCIDRs
	if ranges == nil {
		ranges = privateRanges
	}
	return len(overlap(blockRange(b), prefixes(ranges...), 1)) > 0
}

// egressAddrs is the set of addresses outside the cluster's pods that src
// may send to on port/proto: everything when no policy isolates its
// egress, else the union of its rules' ipBlocks (every address for a rule
// with no peers) over the rules whose ports match. A named port matches
// no address: it names a port of a pod.
func (n *Network) egressAddrs(src Pod, port int32, proto corev1.Protocol) addrSet {
	isolated := false
	var out addrSet
	for i := range n.Policies {
		p := &n.Policies[i]
		if p.Namespace != src.Namespace || !hasType(p, networkingv1.PolicyTypeEgress) || !selects(p.Spec.PodSelector, src.Labels) {
			continue
		}
		isolated = true
		for _, r := range p.Spec.Egress {
			if !portsMatch(r.Ports, Pod{}, port, proto) {
				continue
			}
			if len(r.To) == 0 {
				return everywhere
			}
			for _, peer := range r.To {
				if peer.IPBlock != nil {
					out = append(out, blockRange(peer.IPBlock)...)
				}
			}
		}
	}
	if !isolated {
		return everywhere
	}
	return out
}

func portsMatch(ports []networkingv1.NetworkPolicyPort, dst Pod, port int32, proto corev1.Protocol) bool {
	if len(ports) == 0 {
		return true
	}
	for _, p := range ports {
		pp := corev1.ProtocolTCP
		if p.Protocol != nil {
			pp = *p.Protocol
		}
		if pp != proto {
			continue
		}
		if p.Port == nil {
			return true
		}
		if p.Port.StrVal != "" {
			// A named port: the destination pod's container port of that
			// name and protocol.
			for _, cp := range dst.Ports {
				cpProto := cp.Protocol
				if cpProto == "" {
					cpProto = corev1.ProtocolTCP
				}
				if cp.Name == p.Port.StrVal && cpProto == proto && cp.ContainerPort == port {
					return true
				}
			}
			continue
		}
		lo, hi := p.Port.IntVal, p.Port.IntVal
		if p.EndPort != nil {
			hi = *p.EndPort
		}
		if port >= lo && port <= hi {
			return true
		}
	}
	return false
}

// Target is a port a pod can be reached on.
type Target struct {
	Port  int32
	Proto corev1.Protocol
}

func (t Target) String() string { return fmt.Sprintf("%d/%s", t.Port, t.Proto) }
