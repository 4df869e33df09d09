package check

import (
	"net/netip"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
)

// TestEvaluator pins the evaluator's reading of NetworkPolicy semantics on
// small hand-made cases.
func TestEvaluator(t *testing.T) {
	web := Pod{Namespace: "a", Name: "web", Labels: map[string]string{"app": "web"},
		Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080, Protocol: corev1.ProtocolTCP}}}
	db := Pod{Namespace: "a", Name: "db", Labels: map[string]string{"app": "db"}}
	other := Pod{Namespace: "b", Name: "web", Labels: map[string]string{"app": "web"}}
	nsLabels := map[string]map[string]string{"a": {"team": "x"}, "b": {"team": "y"}}
	type q struct {
		src, dst Pod
		port     int32
		proto    corev1.Protocol
		want     bool
	}
	tcp, udp := corev1.ProtocolTCP, corev1.ProtocolUDP
	cases := []struct {
		name     string
		policies []string // "ns|yaml"
		queries  []q
	}{
		{"no policies: all open", nil, []q{{db, web, 8080, tcp, true}, {other, web, 1, udp, true}}},
		{"deny all ingress in a", []string{"a|metadata: {name: d}\nspec: {podSelector: {}}\n"},
			[]q{{db, web, 8080, tcp, false}, {web, other, 8080, tcp, true}}},
		{"default policyTypes add Egress only with egress rules",
			[]string{"a|metadata: {name: d}\nspec: {podSelector: {}, ingress: [{}]}\n"},
			[]q{{db, web, 8080, tcp, true}, {web, other, 9, tcp, true}}},
		{"deny egress", []string{"a|metadata: {name: d}\nspec: {podSelector: {}, policyTypes: [Egress]}\n"},
			[]q{{web, other, 8080, tcp, false}, {other, web, 8080, tcp, true}}},
		{"podSelector alone is the policy's namespace",
			[]string{"a|metadata: {name: p}\nspec: {podSelector: {matchLabels: {app: web}}, ingress: [{from: [{podSelector: {matchLabels: {app: web}}}]}]}\n"},
			[]q{{other, web, 8080, tcp, false}, {web, web, 8080, tcp, true}}},
		{"namespaceSelector AND podSelector in one peer",
			[]string{"a|metadata: {name: p}\nspec: {podSelector: {}, ingress: [{from: [{namespaceSelector: {matchLabels: {team: 'y'}}, podSelector: {matchLabels: {app: db}}}]}]}\n"},
			[]q{{other, web, 8080, tcp, false}, {Pod{Namespace: "b", Labels: map[string]string{"app": "db"}}, web, 8080, tcp, true}}},
		{"two peers are OR",
			[]string{"a|metadata: {name: p}\nspec: {podSelector: {}, ingress: [{from: [{namespaceSelector: {matchLabels: {team: 'y'}}}, {podSelector: {matchLabels: {app: db}}}]}]}\n"},
			[]q{{other, web, 8080, tcp, true}, {db, web, 8080, tcp, true}}},
		{"metadata.name label is implicit",
			[]string{"a|metadata: {name: p}\nspec: {podSelector: {}, ingress: [{from: [{namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: b}}}]}]}\n"},
			[]q{{other, web, 8080, tcp, true}, {db, web, 8080, tcp, false}}},
		{"ports, named ports, endPort and protocol",
			[]string{"a|metadata: {name: p}\nspec: {podSelector: {}, ingress: [{ports: [{port: http}, {port: 9000, endPort: 9010}, {protocol: UDP, port: 53}]}]}\n"},
			[]q{{other, web, 8080, tcp, true}, {other, web, 8081, tcp, false}, {other, db, 8080, tcp, false},
				{other, web, 9005, tcp, true}, {other, web, 9011, tcp, false}, {other, web, 53, udp, true}, {other, web, 53, tcp, false}}},
		{"both sides must allow",
			[]string{"b|metadata: {name: e}\nspec: {podSelector: {}, policyTypes: [Egress], egress: [{to: [{podSelector: {}}]}]}\n"},
			[]q{{other, web, 8080, tcp, false}, {web, other, 8080, tcp, true}}},
		{"an ipBlock over pod ranges matches pods",
			[]string{"a|metadata: {name: p}\nspec: {podSelector: {}, ingress: [{from: [{ipBlock: {cidr: 0.0.0.0/0}}]}]}\n"},
			[]q{{other, web, 8080, tcp, true}}},
		{"an ipBlock outside pod ranges does not",
			[]string{"a|metadata: {name: p}\nspec: {podSelector: {}, ingress: [{from: [{ipBlock: {cidr: 203.0.113.0/24}}]}]}\n"},
			[]q{{other, web, 8080, tcp, false}}},
		{"an ipBlock whose excepts cover the pod ranges does not",
			[]string{"a|metadata: {name: p}\nspec: {podSelector: {}, ingress: [{from: [{ipBlock: {cidr: 0.0.0.0/0, except: [10.0.0.0/8, 172.16.0.0/12, 192.168.0.0/16, 100.64.0.0/10]}}, " +
				"{ipBlock: {cidr: '::/0', except: ['fc00::/7']}}]}]}\n"},
			[]q{{other, web, 8080, tcp, false}}},
		{"an ipBlock whose excepts leave part of a pod range does",
			[]string{"a|metadata: {name: p}\nspec: {podSelector: {}, ingress: [{from: [{ipBlock: {cidr: 0.0.0.0/0, except: [10.0.0.0/8, 172.16.0.0/16, 192.168.0.0/16, 100.64.0.0/10]}}]}]}\n"},
			[]q{{other, web, 8080, tcp, true}}},
		{"an IPv6 ipBlock over unique local addresses does",
			[]string{"a|metadata: {name: p}\nspec: {podSelector: {}, ingress: [{from: [{ipBlock: {cidr: '::/0', except: ['fe80::/10']}}]}]}\n"},
			[]q{{other, web, 8080, tcp, true}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			n := Network{Namespaces: nsLabels}
			for _, p := range c.policies {
				ns, doc, _ := strings.Cut(p, "|")
				n.Policies = append(n.Policies, *policy(t, ns, doc).Typed.(*networkingv1.NetworkPolicy))
			}
			for _, q := range c.queries {
				if got := n.Allowed(q.src, q.dst, q.port, q.proto); got != q.want {
					t.Errorf("%s -> %s %d/%s: %v, want %v", q.src, q.dst, q.port, q.proto, got, q.want)
				}
			}
		})
	}
}

// TestEgressAddrs pins what the evaluator lets a pod send to outside the
// cluster's pods: ipBlocks and rules with no peers, on the rules' ports.
func TestEgressAddrs(t *testing.T) {
	web := Pod{Namespace: "a", Name: "web", Labels: map[string]string{"app": "web"}}
	tcp, udp := corev1.ProtocolTCP, corev1.ProtocolUDP
	metadata, partner := netip.MustParseAddr("169.254.169.254"), netip.MustParseAddr("203.0.113.7")
	type q struct {
		port  int32
		proto corev1.Protocol
		addr  netip.Addr
		want  bool
	}
	for _, c := range []struct {
		name     string
		policies []string
		queries  []q
	}{
		{"no policies: everything", nil, []q{{22, tcp, metadata, true}, {53, udp, partner, true}}},
		{"another pod's policy: everything",
			[]string{"a|metadata: {name: p}\nspec: {podSelector: {matchLabels: {app: db}}, policyTypes: [Egress]}\n"},
			[]q{{443, tcp, partner, true}}},
		{"deny egress: nothing", []string{"a|metadata: {name: d}\nspec: {podSelector: {}, policyTypes: [Egress]}\n"},
			[]q{{443, tcp, partner, false}}},
		{"an ipBlock on its port",
			[]string{"a|metadata: {name: p}\nspec: {podSelector: {}, policyTypes: [Egress], egress: [{to: [{ipBlock: {cidr: 0.0.0.0/0, except: [169.254.0.0/16]}}], ports: [{port: 443}]}]}\n"},
			[]q{{443, tcp, partner, true}, {443, tcp, metadata, false}, {443, udp, partner, false}, {80, tcp, partner, false}}},
		{"selectors reach no address",
			[]string{"a|metadata: {name: p}\nspec: {podSelector: {}, policyTypes: [Egress], egress: [{to: [{namespaceSelector: {}}, {podSelector: {}}]}]}\n"},
			[]q{{443, tcp, partner, false}, {443, tcp, netip.MustParseAddr("10.0.0.1"), false}}},
		{"a rule with no peers reaches every address",
			[]string{"a|metadata: {name: p}\nspec: {podSelector: {}, policyTypes: [Egress], egress: [{ports: [{port: 443}, {port: 6443}]}]}\n"},
			[]q{{443, tcp, metadata, true}, {6443, tcp, partner, true}, {80, tcp, partner, false}}},
		{"a named port reaches no address",
			[]string{"a|metadata: {name: p}\nspec: {podSelector: {}, policyTypes: [Egress], egress: [{to: [{ipBlock: {cidr: 0.0.0.0/0}}], ports: [{port: https}]}]}\n"},
			[]q{{443, tcp, partner, false}}},
		{"a port range",
			[]string{"a|metadata: {name: p}\nspec: {podSelector: {}, policyTypes: [Egress], egress: [{to: [{ipBlock: {cidr: 203.0.113.0/24}}], ports: [{port: 1, endPort: 65535}]}]}\n"},
			[]q{{22, tcp, partner, true}, {22, tcp, metadata, false}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			n := Network{}
			for _, p := range c.policies {
				ns, doc, _ := strings.Cut(p, "|")
				n.Policies = append(n.Policies, *policy(t, ns, doc).Typed.(*networkingv1.NetworkPolicy))
			}
			for _, q := range c.queries {
				if got := n.egressAddrs(web, q.port, q.proto).has(q.addr); got != q.want {
					t.Errorf("%s -> %s %d/%s: %v, want %v", web, q.addr, q.port, q.proto, got, q.want)
				}
			}
		})
	}
}

// TestLeakyPoliciesAreCaught adds leaky policies to the real manifests and
// proves the checks report each leak.
func TestLeakyPoliciesAreCaught(t *testing.T) {
	base := renderAll(t, deployDir)
	cases := []struct {
		name  string
		add   []Object
		drop  string // "ns/name" of a policy to remove
		wants []string
	}{
		{
			name: "allow all egress from cell-a and all ingress into cell-b",
			add: []Object{
				policy(t, "cell-a", "metadata: {name: leak-out}\nspec: {podSelector: {}, policyTypes: [Egress], egress: [{}]}\n"),
				policy(t, "cell-b", "metadata: {name: leak-in}\nspec: {podSelector: {}, policyTypes: [Ingress], ingress: [{}]}\n"),
			},
			wants: []string{"cross-cell path: cell-a/cell can reach cell-b/postgres on 5432/TCP", "cross-cell path: cell-a/cell can reach cell-b/cell on 7081/TCP"},
		},
		{
			// The classic mistake: two peers (OR) where one peer with both
			// selectors (AND) was meant.
			name: "GTR ingress written as two peers",
			add: []Object{policy(t, "cell-b", "metadata: {name: or-mistake}\nspec:\n  podSelector: {matchLabels: {app.kubernetes.io/name: cell}}\n"+
				"  ingress: [{from: [{namespaceSelector: {}}, {podSelector: {matchLabels: {app.kubernetes.io/name: gtr}}}]}]\n")},
			wants: []string{"cell-b/cell admits cell-a/cell", "cell-b/cell admits default/outsider"},
		},
		{
			name: "cell-c egress opened to every cell namespace",
			add: []Object{policy(t, "cell-c", "metadata: {name: to-cells}\nspec:\n  podSelector: {matchLabels: {app.kubernetes.io/name: cell}}\n"+
				"  policyTypes: [Egress]\n  egress: [{to: [{namespaceSelector: {matchLabels: {cellpay.io/role: cell}}}]}]\n")},
			wants: []string{"cell-c/cell may send to cell-a/postgres"},
		},
		{
			name:  "default deny removed from cell-a",
			drop:  "cell-a/default-deny",
			wants: []string{"cell-a: not deny-by-default", "cell-a: no default-deny NetworkPolicy"},
		},
		{
			name:  "Postgres open to everyone",
			add:   []Object{policy(t, "cell-b", "metadata: {name: pg-open}\nspec: {podSelector: {matchLabels: {cnpg.io/cluster: postgres}}, ingress: [{}]}\n")},
			wants: []string{"cell-b/postgres admits cell-a/cell on 5432/TCP", "cell-b/postgres admits default/spoofed-cnpg-operator on 8000/TCP"},
		},
		{
			// The operator's peer without its namespace: any pod wearing
			// its label would reach the instances' status port.
			name: "operator admitted by pod label alone",
			add: []Object{policy(t, "cell-a", "metadata: {name: op-any-ns}\nspec:\n  podSelector: {matchLabels: {cnpg.io/cluster: postgres}}\n"+
				"  ingress: [{from: [{namespaceSelector: {}, podSelector: {matchLabels: {app.kubernetes.io/name: cloudnative-pg}}}], ports: [{port: 8000}]}]\n")},
			wants: []string{"cell-a/postgres admits default/spoofed-cnpg-operator on 8000/TCP"},
		},
		{
			name: "instances' egress opened",
			add: []Object{policy(t, "cell-c", "metadata: {name: pg-out}\nspec:\n  podSelector: {matchLabels: {cnpg.io/cluster: postgres}}\n"+
				"  policyTypes: [Egress]\n  egress: [{}]\n")},
			wants: []string{"cell-c/postgres may send to cellpay-nats/nats on 4222/TCP", "cell-c/postgres may send to cell-c/cell on 7081/TCP"},
		},
		{
			name: "a cell's egress opened to cert-manager",
			add: []Object{policy(t, "cell-b", "metadata: {name: to-cert-manager}\nspec:\n  podSelector: {}\n  policyTypes: [Egress]\n"+
				"  egress: [{to: [{namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: cert-manager}}}]}]\n")},
			wants: []string{"cell-b/cell may send to cert-manager/cert-manager on 9402/TCP", "cell-b/postgres may send to cert-manager/cert-manager-webhook on 10250/TCP",
				"cell-b: not deny-by-default: an unlabelled pod may send to cert-manager/cert-manager-cainjector on 9402/TCP"},
		},
		{
			name:  "instances cannot replicate",
			drop:  "cell-b/postgres-egress",
			wants: []string{"cell-b/postgres cannot reach cell-b/postgres on 5432/TCP", "cell-b/postgres cannot reach kube-system/kube-dns on 53/UDP"},
		},
		{
			name:  "operator shut out",
			drop:  "cell-a/postgres-ingress",
			wants: []string{"cnpg-system/cnpg-operator cannot reach cell-a/postgres on 8000/TCP", "cell-a/cell cannot reach cell-a/postgres on 5432/TCP"},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var objs []Object
			for _, o := range base {
				if o.GVK.Kind == "NetworkPolicy" && o.Namespace+"/"+o.Name == c.drop {
					continue
				}
				objs = append(objs, o)
			}
			got := strings.Join(Check(append(objs, c.add...)), "\n")
			for _, w := range c.wants {
				if !strings.Contains(got, w) {
					t.Errorf("no violation containing %q; got:\n%s", w, got)
				}
			}
		})
	}
}
