package check

import (
	"strings"
	"testing"

	policyv1alpha1 "github.com/cert-manager/approver-policy/pkg/apis/policy/v1alpha1"
	cmv1 "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	rbacv1 "k8s.io/api/rbac/v1"
)

// dropped returns objs less one object, which must be there.
func dropped(t *testing.T, objs []Object, kind, ns, name string) []Object {
	t.Helper()
	out := without(objs, kind, ns, name)
	if len(out) != len(objs)-1 {
		t.Fatalf("no %s %s/%s rendered", kind, ns, name)
	}
	return out
}

// TestIssuanceChecksCatch breaks who may obtain which certificate, one way
// at a time, and expects each to be reported.
func TestIssuanceChecksCatch(t *testing.T) {
	base := renderAll(t, deployDir)
	if v := CheckIssuance(NewWorld(base)); len(v) != 0 {
		t.Fatalf("the committed manifests: %v", v)
	}
	policy := func(name string, change func(s *policyv1alpha1.CertificateRequestPolicySpec)) []Object {
		return withObject(t, base, "CertificateRequestPolicy", "", name, func(p *policyv1alpha1.CertificateRequestPolicy) { change(&p.Spec) })
	}
	const (
		gtrID       = "spiffe://cellpay.internal/gtr"
		notApproved = "no CertificateRequestPolicy selects namespace"
	)
	cases := []brokenCase{
		{"a cell's policy allowing a wildcard URI", policy("cell-a.cell", func(s *policyv1alpha1.CertificateRequestPolicySpec) {
			s.Allowed.URIs.Values = &[]string{"spiffe://cellpay.internal/*"}
		}), []string{
			`CertificateRequestPolicy cell-a.cell: allows uris "spiffe://cellpay.internal/*", which no Certificate of namespace cell-a asks its issuer for`,
			"namespace cell-a may obtain " + gtrID + ", the identity of Certificate cellpay-gtr/gtr-internal, through CertificateRequestPolicy cell-a.cell",
			"namespace cell-a may obtain spiffe://cellpay.internal/cell/cell-b, the identity of Certificate cell-b/cell",
		}},
		{"a namespace without a policy", dropped(t, base, "CertificateRequestPolicy", "", "cell-b.cell"), []string{
			"Certificate cell-b/cell: " + notApproved + " cell-b and ClusterIssuer cellpay-internal-ca with cert-manager bound to use it there",
		}},
		{"the GTR's identity for every namespace", policy("cellpay-gtr.gtr-internal", func(s *policyv1alpha1.CertificateRequestPolicySpec) {
			s.Selector.Namespace = nil
		}), []string{
			"CertificateRequestPolicy cellpay-gtr.gtr-internal: selects every namespace",
			"namespace cell-a may obtain " + gtrID + ", the identity of Certificate cellpay-gtr/gtr-internal, through CertificateRequestPolicy cellpay-gtr.gtr-internal",
			"namespace default may obtain " + gtrID,
		}},
		{"a policy for every namespace by pattern", policy("cellpay-issuer.issuersim", func(s *policyv1alpha1.CertificateRequestPolicySpec) {
			s.Selector.Namespace.MatchNames = []string{"*"}
		}), []string{
			`CertificateRequestPolicy cellpay-issuer.issuersim: selects namespaces by pattern "*"`,
			"namespace cell-c may obtain spiffe://cellpay.internal/issuer, the identity of Certificate cellpay-issuer/issuersim",
		}},
		{"a cell's policy for every cell", policy("cell-a.cell", func(s *policyv1alpha1.CertificateRequestPolicySpec) {
			s.Selector.Namespace.MatchNames = []string{"cell-*"}
		}), []string{
			`CertificateRequestPolicy cell-a.cell: selects namespaces by pattern "cell-*"`,
			"namespace cell-b may obtain spiffe://cellpay.internal/cell/cell-a, the identity of Certificate cell-a/cell, through CertificateRequestPolicy cell-a.cell",
		}},
		{"a cell's policy in the GTR's namespace", policy("cell-c.cell", func(s *policyv1alpha1.CertificateRequestPolicySpec) {
			s.Selector.Namespace.MatchNames = []string{GTRNamespace}
		}), []string{
			"Certificate cell-c/cell: " + notApproved + " cell-c",
			"namespace cellpay-gtr may obtain spiffe://cellpay.internal/cell/cell-c, the identity of Certificate cell-c/cell",
		}},
		{"a policy for two namespaces", policy("cellpay-nats.replicator", func(s *policyv1alpha1.CertificateRequestPolicySpec) {
			s.Selector.Namespace.MatchNames = append(s.Selector.Namespace.MatchNames, "cell-a")
		}), []string{
			"CertificateRequestPolicy cellpay-nats.replicator: selects namespaces [cellpay-nats cell-a], want its own alone",
			"namespace cell-a may obtain spiffe://cellpay.internal/replicator, the identity of Certificate cellpay-nats/replicator",
		}},
		{"a policy for every issuer", policy("cellpay-nats.nats", func(s *policyv1alpha1.CertificateRequestPolicySpec) {
			s.Selector.IssuerRef = &policyv1alpha1.CertificateRequestPolicySelectorIssuerRef{}
		}), []string{"CertificateRequestPolicy cellpay-nats.nats: does not select one issuer by exact name, kind and group"}},
		{"a policy for the wrong issuer", policy("cellpay-gtr.gtr-internal", func(s *policyv1alpha1.CertificateRequestPolicySpec) {
			s.Selector.IssuerRef.Kind, s.Selector.IssuerRef.Name = new("Issuer"), new("gtr-ca")
		}), []string{
			// The admin certificate's policy still selects the namespace and
			// issuer, and denies this request.
			"Certificate cellpay-gtr/gtr-internal: no CertificateRequestPolicy allows its request (cellpay-gtr.gtr-admin: commonName \"gtr\": none allowed",
		}},
		{"a sub-CA of the internal CA", policy("cellpay-nats.replicator", func(s *policyv1alpha1.CertificateRequestPolicySpec) {
			s.Allowed.IsCA = new(true)
		}), []string{"CertificateRequestPolicy cellpay-nats.replicator: allows CA certificates, which no Certificate of namespace cellpay-nats asks its issuer for"}},
		{"a usage beyond the certificates'", policy("cellpay-gtr.gtr-internal", func(s *policyv1alpha1.CertificateRequestPolicySpec) {
			*s.Allowed.Usages = append(*s.Allowed.Usages, cmv1.UsageCodeSigning)
		}), []string{`CertificateRequestPolicy cellpay-gtr.gtr-internal: allows usages "code signing", which no Certificate of namespace cellpay-gtr asks its issuer for`}},
		{"the GTR's client policy widened to its admin certificate's usage", policy("cellpay-gtr.gtr-internal", func(s *policyv1alpha1.CertificateRequestPolicySpec) {
			*s.Allowed.Usages = append(*s.Allowed.Usages, cmv1.UsageServerAuth)
		}), []string{`CertificateRequestPolicy cellpay-gtr.gtr-internal: allows usages "server auth" beyond Certificate cellpay-gtr/gtr-internal, the Certificate it fits best: a policy fitting two Certificates approves one's names with the other's usages`}},
		{"the GTR's admin policy widened to its client certificate's name", policy("cellpay-gtr.gtr-admin", func(s *policyv1alpha1.CertificateRequestPolicySpec) {
			s.Allowed.CommonName = &policyv1alpha1.CertificateRequestPolicyAllowedString{Value: new("gtr")}
		}), []string{`CertificateRequestPolicy cellpay-gtr.gtr-admin: allows commonName "gtr" beyond Certificate cellpay-gtr/gtr-admin`}},
		{"the GTR's admin identity for every namespace", policy("cellpay-gtr.gtr-admin", func(s *policyv1alpha1.CertificateRequestPolicySpec) {
			s.Selector.Namespace = nil
		}), []string{
			"CertificateRequestPolicy cellpay-gtr.gtr-admin: selects every namespace",
			"namespace cell-b may obtain " + gtrID + ", the identity of Certificate cellpay-gtr/gtr-admin, through CertificateRequestPolicy cellpay-gtr.gtr-admin",
			"namespace cell-b may obtain gtr-admin.cellpay-gtr.svc, the identity of Certificate cellpay-gtr/gtr-admin",
		}},
		{"the admin listener's names beyond Service gtr-admin's", policy("cellpay-gtr.gtr-admin", func(s *policyv1alpha1.CertificateRequestPolicySpec) {
			*s.Allowed.DNSNames.Values = append(*s.Allowed.DNSNames.Values, "gtr-admin.example.com")
		}), []string{`CertificateRequestPolicy cellpay-gtr.gtr-admin: allows dnsNames "gtr-admin.example.com", which no Certificate of namespace cellpay-gtr asks its issuer for`}},
		{"the admin certificate without its policy", withObject(t, base, "Role", GTRNamespace, "cellpay-issuance.gtr", func(r *rbacv1.Role) {
			r.Rules[0].ResourceNames = []string{"cellpay-gtr.gtr", "cellpay-gtr.gtr-internal"}
		}), []string{"Certificate cellpay-gtr/gtr-admin: no CertificateRequestPolicy allows its request (cellpay-gtr.gtr-internal:"}},
		{"a CEL rule the checks cannot prove", policy("cell-b.cell", func(s *policyv1alpha1.CertificateRequestPolicySpec) {
			s.Allowed.URIs.Validations = []policyv1alpha1.ValidationRule{{Rule: "self.startsWith('spiffe://')"}}
		}), []string{"CertificateRequestPolicy cell-b.cell: uses CEL validations or plugins, which the checks cannot evaluate"}},
		{"a name the policy does not allow", withObject(t, base, "Certificate", "cell-a", "cell", func(c *cmv1.Certificate) {
			c.Spec.DNSNames = append(c.Spec.DNSNames, "gtr.cellpay-gtr.svc")
		}), []string{`Certificate cell-a/cell: no CertificateRequestPolicy allows its request (cell-a.cell: dnsNames "gtr.cellpay-gtr.svc" not allowed)`}},
		{"a usage the policy does not allow", withObject(t, base, "Certificate", "cellpay-issuer", "issuersim", func(c *cmv1.Certificate) {
			c.Spec.Usages = append(c.Spec.Usages, cmv1.UsageClientAuth)
		}), []string{`Certificate cellpay-issuer/issuersim: no CertificateRequestPolicy allows its request (cellpay-issuer.issuersim: usage "client auth" not allowed)`}},
		{"a CA the policy does not allow", withObject(t, base, "Certificate", "cell-b", "cell", func(c *cmv1.Certificate) {
			c.Spec.IsCA = true
		}), []string{"Certificate cell-b/cell: no CertificateRequestPolicy allows its request (cell-b.cell: isCA: a CA certificate is not allowed)"}},
		{"cert-manager not bound", dropped(t, base, "RoleBinding", "cell-c", "cellpay-issuance.cell"), []string{
			"Certificate cell-c/cell: " + notApproved + " cell-c and ClusterIssuer cellpay-internal-ca with cert-manager bound to use it there",
		}},
		{"bound to another namespace's policy", withObject(t, base, "Role", "cell-a", "cellpay-issuance.cell", func(r *rbacv1.Role) {
			r.Rules[0].ResourceNames = []string{"cell-b.cell"}
		}), []string{"Certificate cell-a/cell: " + notApproved + " cell-a"}},
		{"someone else bound", withObject(t, base, "RoleBinding", GTRNamespace, "cellpay-issuance.gtr", func(b *rbacv1.RoleBinding) {
			b.Subjects = append(b.Subjects, rbacv1.Subject{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "alice"})
		}), []string{"RoleBinding cellpay-gtr/cellpay-issuance.gtr: lets User alice use CertificateRequestPolicies, want cert-manager's ServiceAccount alone"}},
	}
	checkBroken(t, cases)
}

// TestIssuanceNewCell: a generated cell gets a policy of its own, which
// gives it its identity and no other.
func TestIssuanceNewCell(t *testing.T) {
	files, err := OverlayFiles(newCellName)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := files["issuance-policy.yaml"]; !ok {
		t.Fatalf("a new cell's overlay has no issuance-policy.yaml; files: %v", files)
	}
	if !strings.Contains(string(files["kustomization.yaml"]), "  - issuance-policy.yaml\n") {
		t.Error("a new cell's kustomization.yaml does not list issuance-policy.yaml")
	}
}

// TestWildcardMatch holds the matcher to approver-policy's wildcards.
func TestWildcardMatch(t *testing.T) {
	for _, c := range []struct {
		pattern, s string
		want       bool
	}{
		{"", "", true}, {"", "a", false}, {"*", "", true}, {"*", "anything", true},
		{"spiffe://cellpay.internal/*", "spiffe://cellpay.internal/gtr", true},
		{"spiffe://cellpay.internal/cell/*", "spiffe://cellpay.internal/gtr", false},
		{"*.nats-cluster.cellpay-nats.svc", "nats-0.nats-cluster.cellpay-nats.svc", true},
		{"*.nats-cluster.cellpay-nats.svc", "*.nats-cluster.cellpay-nats.svc", true},
		{"*.nats-cluster.cellpay-nats.svc", "nats-cluster.cellpay-nats.svc", false},
		{"cell-*", "cell-a", true}, {"cell-*", "cellpay-gtr", false}, {"a*b*c", "aXbYbZc", true}, {"a*b*c", "aXbYc0", false},
		{"gtr", "gtr", true}, {"gtr", "gtr-backup", false},
	} {
		if got := wildcardMatch(c.pattern, c.s); got != c.want {
			t.Errorf("wildcardMatch(%q, %q) = %v, want %v", c.pattern, c.s, got, c.want)
		}
	}
}
