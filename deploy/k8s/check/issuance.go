package check

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	policyv1alpha1 "github.com/cert-manager/approver-policy/pkg/apis/policy/v1alpha1"
	cmv1 "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// Who may obtain which certificate. One ClusterIssuer signs the internal
// hops' certificates for every namespace, so the issuer alone would sign
// spiffe://cellpay.internal/gtr for any namespace that asks. With
// cert-manager's built-in approver off and approver-policy installed
// (README.md, "Who may obtain a certificate"), a CertificateRequest is
// signed only when a CertificateRequestPolicy approves it. This file
// evaluates the rendered policies as approver-policy (v0.28) does: its
// selector (namespace, issuer), its RBAC check (the requester may `use` the
// policy in the request's namespace) and its "allowed" and "constraints"
// evaluators, over the requests cert-manager makes for the rendered
// Certificates.

// CertManagerServiceAccount is the ServiceAccount of cert-manager's
// controller (in CertManagerNamespace), which makes the CertificateRequest
// of every Certificate, and so the requester approver-policy checks.
const CertManagerServiceAccount = "cert-manager"

// policyAPIGroup and policyResource are what a Role grants `use` on.
const (
	policyAPIGroup = "policy.cert-manager.io"
	policyResource = "certificaterequestpolicies"
)

// certRequest is the CertificateRequest cert-manager makes for a
// Certificate: in its namespace, for its issuer, with its names, subject,
// usages, CA flag, duration and key.
type certRequest struct {
	Certificate Object
	Namespace   string
	Issuer      issuerKey
	CommonName  string
	// SANs by kind: "dnsNames", "uris", "ipAddresses", "emailAddresses".
	SANs    map[string][]string
	Subject map[string][]string // by approver-policy's field name
	Serial  string
	IsCA    bool
	Usages  []string
	// Duration is nil when the Certificate sets none (cert-manager then
	// asks for none, and the issuer's default applies).
	Duration *metav1.Duration
	KeyAlg   string
	KeySize  int
	// Unchecked names what the Certificate asks for that the checks do
	// not evaluate.
	Unchecked []string
}

// issuerKey is an issuer reference with cert-manager's defaults filled in.
type issuerKey struct{ Name, Kind, Group string }

func (r issuerKey) String() string { return r.Kind + " " + r.Name }

// sanKinds are the SAN kinds a policy allows by value, in its field names.
var sanKinds = []string{"dnsNames", "uris", "ipAddresses", "emailAddresses"}

// requestOf is the request cert-manager makes for Certificate o.
func requestOf(o Object) certRequest {
	c := o.Typed.(*cmv1.Certificate)
	r := certRequest{
		Certificate: o, Namespace: o.Namespace, CommonName: c.Spec.CommonName, IsCA: c.Spec.IsCA,
		Issuer:   issuerKey{Name: c.Spec.IssuerRef.Name, Kind: c.Spec.IssuerRef.Kind, Group: c.Spec.IssuerRef.Group},
		SANs:     map[string][]string{"dnsNames": c.Spec.DNSNames, "uris": c.Spec.URIs, "ipAddresses": c.Spec.IPAddresses, "emailAddresses": c.Spec.EmailAddresses},
		Subject:  map[string][]string{},
		Duration: c.Spec.Duration,
		KeyAlg:   string(cmv1.RSAKeyAlgorithm),
	}
	if r.Issuer.Kind == "" {
		r.Issuer.Kind = "Issuer"
	}
	if r.Issuer.Group == "" {
		r.Issuer.Group = "cert-manager.io"
	}
	if s := c.Spec.Subject; s != nil {
		r.Subject = map[string][]string{
			"organizations": s.Organizations, "countries": s.Countries, "organizationalUnits": s.OrganizationalUnits,
			"localities": s.Localities, "provinces": s.Provinces, "streetAddresses": s.StreetAddresses, "postalCodes": s.PostalCodes,
		}
		r.Serial = s.SerialNumber
	}
	for _, u := range c.Spec.Usages {
		r.Usages = append(r.Usages, string(u))
	}
	if c.Spec.LiteralSubject != "" {
		r.Unchecked = append(r.Unchecked, "literalSubject")
	}
	if len(c.Spec.OtherNames) > 0 {
		r.Unchecked = append(r.Unchecked, "otherNames")
	}
	if k := c.Spec.PrivateKey; k != nil {
		if k.Algorithm != "" {
			r.KeyAlg = string(k.Algorithm)
		}
		r.KeySize = k.Size
	}
	if r.KeySize == 0 {
		switch r.KeyAlg {
		case string(cmv1.RSAKeyAlgorithm):
			r.KeySize = 2048
		case string(cmv1.ECDSAKeyAlgorithm):
			r.KeySize = 256
		}
	}
	return r
}

// identities are the names a Certificate proves: its SANs, of every kind.
func (r certRequest) identities() []string {
	var out []string
	for _, k := range sanKinds {
		out = append(out, r.SANs[k]...)
	}
	return out
}

// issuancePolicy is a rendered CertificateRequestPolicy.
type issuancePolicy struct {
	Object
	Spec policyv1alpha1.CertificateRequestPolicySpec
}

func (w *World) policies() []issuancePolicy {
	var out []issuancePolicy
	for _, o := range w.Find("CertificateRequestPolicy", "") {
		out = append(out, issuancePolicy{o, o.Typed.(*policyv1alpha1.CertificateRequestPolicy).Spec})
	}
	return out
}

// selectsNamespace says whether p's namespace selector takes requests in
// namespace ns, as approver-policy matches it: no selector, or no names,
// takes every namespace; names may hold wildcards; labels must match the
// namespace's.
func (w *World) selectsNamespace(p issuancePolicy, ns string) bool {
	sel := p.Spec.Selector.Namespace
	if sel == nil {
		return true
	}
	matched := len(sel.MatchNames) == 0
	for _, n := range sel.MatchNames {
		matched = matched || wildcardMatch(n, ns)
	}
	if !matched {
		return false
	}
	if sel.MatchLabels != nil {
		return labels.SelectorFromSet(sel.MatchLabels).Matches(labels.Set(w.Net.Namespaces[ns]))
	}
	return true
}

// selectsIssuer says whether p's issuer selector takes requests for r.
func selectsIssuer(p issuancePolicy, r issuerKey) bool {
	sel := p.Spec.Selector.IssuerRef
	if sel == nil {
		return true
	}
	for _, f := range []struct {
		pattern *string
		value   string
	}{{sel.Name, r.Name}, {sel.Kind, r.Kind}, {sel.Group, r.Group}} {
		if f.pattern != nil && !wildcardMatch(*f.pattern, f.value) {
			return false
		}
	}
	return true
}

// mayUse says whether cert-manager's ServiceAccount may `use` policy name
// in namespace ns: a RoleBinding there, or a ClusterRoleBinding, grants it
// through its Role or ClusterRole.
func (w *World) mayUse(name, ns string) bool {
	for _, o := range w.Objects {
		var ref rbacv1.RoleRef
		var subjects []rbacv1.Subject
		roleNS := ""
		switch b := o.Typed.(type) {
		case *rbacv1.RoleBinding:
			if o.Namespace != ns {
				continue
			}
			ref, subjects, roleNS = b.RoleRef, b.Subjects, ns
		case *rbacv1.ClusterRoleBinding:
			ref, subjects = b.RoleRef, b.Subjects
		default:
			continue
		}
		if !slices.ContainsFunc(subjects, isCertManager) {
			continue
		}
		var rules []rbacv1.PolicyRule
		switch {
		case ref.Kind == "Role" && roleNS != "":
			if r, ok := w.get("Role", roleNS, ref.Name); ok {
				rules = r.Typed.(*rbacv1.Role).Rules
			}
		case ref.Kind == "ClusterRole":
			if r, ok := w.get("ClusterRole", "", ref.Name); ok {
				rules = r.Typed.(*rbacv1.ClusterRole).Rules
			}
		}
		for _, rule := range rules {
			if grantsUse(rule, name) {
				return true
			}
		}
	}
	return false
}

// isCertManager says whether s names cert-manager's ServiceAccount, by
// itself or through a group it is in.
func isCertManager(s rbacv1.Subject) bool {
	switch s.Kind {
	case rbacv1.ServiceAccountKind:
		return s.Name == CertManagerServiceAccount && s.Namespace == CertManagerNamespace
	case rbacv1.UserKind:
		return s.Name == "system:serviceaccount:"+CertManagerNamespace+":"+CertManagerServiceAccount
	case rbacv1.GroupKind:
		return s.Name == "system:serviceaccounts" || s.Name == "system:serviceaccounts:"+CertManagerNamespace || s.Name == "system:authenticated"
	}
	return false
}

// grantsUse says whether rule grants `use` on policy name.
func grantsUse(rule rbacv1.PolicyRule, name string) bool {
	return grantsUseAny(rule) && (len(rule.ResourceNames) == 0 || slices.Contains(rule.ResourceNames, name))
}

// grantsUseAny says whether rule grants `use` on some policy.
func grantsUseAny(rule rbacv1.PolicyRule) bool {
	has := func(list []string, v string) bool { return slices.Contains(list, v) || slices.Contains(list, "*") }
	return has(rule.APIGroups, policyAPIGroup) && has(rule.Resources, policyResource) && has(rule.Verbs, "use")
}

// applicable are the policies approver-policy weighs for r: they select its
// namespace and issuer, and cert-manager may use them there.
func (w *World) applicable(r certRequest) []issuancePolicy {
	var out []issuancePolicy
	for _, p := range w.policies() {
		if w.selectsNamespace(p, r.Namespace) && selectsIssuer(p, r.Issuer) && w.mayUse(p.Name, r.Namespace) {
			out = append(out, p)
		}
	}
	return out
}

// denies says why policy p does not allow request r; none means it does.
// It follows approver-policy's evaluators: an omitted field allows nothing
// (the request must leave it empty), values may hold wildcards, and a
// request may ask for less than is allowed, never more.
func denies(p issuancePolicy, r certRequest) []string {
	var why []string
	a := p.Spec.Allowed
	if a == nil {
		a = &policyv1alpha1.CertificateRequestPolicyAllowed{}
	}
	if len(p.Spec.Plugins) > 0 {
		why = append(why, "plugins, which the checks cannot evaluate")
	}
	why = append(why, deniesString("commonName", r.CommonName, a.CommonName)...)
	for _, k := range sanKinds {
		why = append(why, deniesSlice(k, r.SANs[k], allowedSAN(a, k))...)
	}
	if r.IsCA && (a.IsCA == nil || !*a.IsCA) {
		why = append(why, "isCA: a CA certificate is not allowed")
	}
	if len(r.Usages) > 0 {
		if a.Usages == nil {
			why = append(why, fmt.Sprintf("usages %v: none allowed", r.Usages))
		} else {
			var allowed []string
			for _, u := range *a.Usages {
				allowed = append(allowed, string(u))
			}
			for _, u := range r.Usages {
				if !wildcardContains(allowed, u) {
					why = append(why, fmt.Sprintf("usage %q not allowed", u))
				}
			}
		}
	}
	subject := a.Subject
	if subject == nil {
		subject = &policyv1alpha1.CertificateRequestPolicyAllowedX509Subject{}
	}
	for _, f := range subjectFields(subject) {
		why = append(why, deniesSlice("subject."+f.name, r.Subject[f.name], f.allowed)...)
	}
	why = append(why, deniesString("subject.serialNumber", r.Serial, subject.SerialNumber)...)
	if len(subject.OtherAttributes) > 0 || len(a.OtherNames) > 0 {
		why = append(why, "otherAttributes or otherNames, which the checks do not evaluate")
	}
	return append(why, deniesConstraints(p.Spec.Constraints, r)...)
}

func allowedSAN(a *policyv1alpha1.CertificateRequestPolicyAllowed, kind string) *policyv1alpha1.CertificateRequestPolicyAllowedStringSlice {
	switch kind {
	case "dnsNames":
		return a.DNSNames
	case "uris":
		return a.URIs
	case "ipAddresses":
		return a.IPAddresses
	case "emailAddresses":
		return a.EmailAddresses
	}
	return nil
}

type subjectField struct {
	name    string
	allowed *policyv1alpha1.CertificateRequestPolicyAllowedStringSlice
}

func subjectFields(s *policyv1alpha1.CertificateRequestPolicyAllowedX509Subject) []subjectField {
	return []subjectField{
		{"organizations", s.Organizations}, {"countries", s.Countries}, {"organizationalUnits", s.OrganizationalUnits},
		{"localities", s.Localities}, {"provinces", s.Provinces}, {"streetAddresses", s.StreetAddresses}, {"postalCodes", s.PostalCodes},
	}
}

// deniesString evaluates one requested value against an allowed string.
func deniesString(field, value string, a *policyv1alpha1.CertificateRequestPolicyAllowedString) []string {
	if value == "" {
		if a != nil && isTrue(a.Required) {
			return []string{field + ": required, and not asked for"}
		}
		return nil
	}
	switch {
	case a == nil || a.Value == nil && len(a.Validations) == 0:
		return []string{fmt.Sprintf("%s %q: none allowed", field, value)}
	case len(a.Validations) > 0:
		return []string{field + ": CEL validations, which the checks cannot evaluate"}
	case !wildcardMatch(*a.Value, value):
		return []string{fmt.Sprintf("%s %q: only %q allowed", field, value, *a.Value)}
	}
	return nil
}

// deniesSlice evaluates requested values against an allowed list.
func deniesSlice(field string, values []string, a *policyv1alpha1.CertificateRequestPolicyAllowedStringSlice) []string {
	if len(values) == 0 {
		if a != nil && isTrue(a.Required) {
			return []string{field + ": required, and not asked for"}
		}
		return nil
	}
	switch {
	case a == nil || a.Values == nil && len(a.Validations) == 0:
		return []string{fmt.Sprintf("%s %v: none allowed", field, values)}
	case len(a.Validations) > 0:
		return []string{field + ": CEL validations, which the checks cannot evaluate"}
	}
	var why []string
	for _, v := range values {
		if !wildcardContains(*a.Values, v) {
			why = append(why, fmt.Sprintf("%s %q not allowed", field, v))
		}
	}
	return why
}

// deniesConstraints evaluates a policy's constraints: the duration asked
// for (which must then be set) and the key.
func deniesConstraints(c *policyv1alpha1.CertificateRequestPolicyConstraints, r certRequest) []string {
	if c == nil {
		return nil
	}
	var why []string
	if c.MinDuration != nil || c.MaxDuration != nil {
		switch {
		case r.Duration == nil:
			why = append(why, "constraints: a duration is required, and not asked for")
		case c.MinDuration != nil && r.Duration.Duration < c.MinDuration.Duration:
			why = append(why, fmt.Sprintf("constraints: duration %s below %s", r.Duration.Duration, c.MinDuration.Duration))
		case c.MaxDuration != nil && r.Duration.Duration > c.MaxDuration.Duration:
			why = append(why, fmt.Sprintf("constraints: duration %s above %s", r.Duration.Duration, c.MaxDuration.Duration))
		}
	}
	if k := c.PrivateKey; k != nil {
		if k.Algorithm != nil && string(*k.Algorithm) != r.KeyAlg {
			why = append(why, fmt.Sprintf("constraints: key algorithm %s, want %s", r.KeyAlg, *k.Algorithm))
		}
		if k.MinSize != nil && r.KeySize < *k.MinSize || k.MaxSize != nil && r.KeySize > *k.MaxSize {
			why = append(why, fmt.Sprintf("constraints: key size %d out of bounds", r.KeySize))
		}
	}
	return why
}

// CheckIssuance checks who may obtain which certificate, as approver-policy
// would decide it over the rendered CertificateRequestPolicies:
//
//   - every rendered Certificate's request is approved: a policy selects
//     its namespace and issuer, cert-manager's ServiceAccount may use that
//     policy in that namespace (a Role and RoleBinding there), and the
//     policy allows all the request asks for;
//   - every policy selects one namespace, by its exact name, and one
//     issuer, by exact name, kind and group; uses nothing the checks cannot
//     evaluate (CEL validations, plugins); and allows nothing beyond what
//     one Certificate of its namespace and issuer asks for: no wildcard or
//     other namespace's URI, no name, usage or CA flag beyond it, and not
//     two Certificates' asks at once (approver-policy judges each field on
//     its own, so such a policy approves one's names with the other's
//     usages);
//   - for every namespace N and every name (URI, DNS name, IP or email
//     SAN) a Certificate of another namespace M proves, no policy that
//     selects N allows that name, whatever issuer it is for and whoever may
//     use it: only the GTR's namespace may obtain the GTR's identity, only
//     a cell's namespace that cell's (a name N's Certificates ask for too,
//     such as a Service's short name, is no one's identity);
//   - only cert-manager's ServiceAccount is bound to use a policy: a user
//     who may create CertificateRequests gets no policy with it.
//
// The namespaces it tries are every rendered one, plus cert-manager's, the
// default namespace, kube-system and cnpg-system.
func CheckIssuance(w *World) []string {
	var v []string
	var requests []certRequest
	for _, o := range w.Find("Certificate", "") {
		requests = append(requests, requestOf(o))
	}
	for _, r := range requests {
		v = append(v, w.approved(r)...)
	}
	for _, p := range w.policies() {
		v = append(v, policyShape(w, p, requests)...)
	}
	var namespaces []string
	for ns := range w.Net.Namespaces {
		namespaces = append(namespaces, ns)
	}
	sort.Strings(namespaces)
	policies := w.policies()
	// The names each namespace's own Certificates ask for: a name two
	// namespaces both ask for (a Service's short name, such as cell, which
	// resolves in each namespace to its own) is neither's identity.
	own := map[string]map[string]bool{}
	for _, r := range requests {
		if own[r.Namespace] == nil {
			own[r.Namespace] = map[string]bool{}
		}
		for _, id := range r.identities() {
			own[r.Namespace][id] = true
		}
	}
	for _, r := range requests {
		for _, ns := range namespaces {
			if ns == r.Namespace {
				continue
			}
			for _, p := range policies {
				if !w.selectsNamespace(p, ns) {
					continue
				}
				a := p.Spec.Allowed
				if a == nil {
					continue
				}
				for _, k := range sanKinds {
					allowed := allowedSAN(a, k)
					for _, id := range r.SANs[k] {
						if !own[ns][id] && allowed != nil && allowed.Values != nil && wildcardContains(*allowed.Values, id) {
							v = append(v, fmt.Sprintf("namespace %s may obtain %s, the identity of %s, through CertificateRequestPolicy %s",
								ns, id, r.Certificate, p.Name))
						}
					}
				}
			}
		}
	}
	v = append(v, policyBindings(w)...)
	return v
}

// approved reports a Certificate whose request no policy approves.
func (w *World) approved(r certRequest) []string {
	if len(r.Unchecked) > 0 {
		return []string{fmt.Sprintf("%s: sets %s, which the checks cannot evaluate", r.Certificate, strings.Join(r.Unchecked, ", "))}
	}
	ps := w.applicable(r)
	if len(ps) == 0 {
		return []string{fmt.Sprintf("%s: no CertificateRequestPolicy selects namespace %s and %s with cert-manager bound to use it there: approver-policy never approves its request, and cert-manager never issues it",
			r.Certificate, r.Namespace, r.Issuer)}
	}
	var all []string
	for _, p := range ps {
		why := denies(p, r)
		if len(why) == 0 {
			return nil
		}
		all = append(all, fmt.Sprintf("%s: %s", p.Name, strings.Join(why, "; ")))
	}
	return []string{fmt.Sprintf("%s: no CertificateRequestPolicy allows its request (%s): cert-manager never issues it",
		r.Certificate, strings.Join(all, " | "))}
}

// policyShape holds one policy to one namespace and one issuer, and to
// allowing only what one Certificate there asks that issuer for.
func policyShape(w *World, p issuancePolicy, requests []certRequest) []string {
	at := "CertificateRequestPolicy " + p.Name
	var v []string
	ns := ""
	switch sel := p.Spec.Selector.Namespace; {
	case sel == nil || len(sel.MatchNames) == 0:
		v = append(v, at+": selects every namespace (no selector.namespace.matchNames): any namespace could obtain what it allows")
	case len(sel.MatchNames) > 1:
		v = append(v, fmt.Sprintf("%s: selects namespaces %v, want its own alone", at, sel.MatchNames))
	case strings.Contains(sel.MatchNames[0], "*"):
		v = append(v, fmt.Sprintf("%s: selects namespaces by pattern %q, want its own by name", at, sel.MatchNames[0]))
	default:
		ns = sel.MatchNames[0]
		if _, ok := w.Net.Namespaces[ns]; !ok {
			v = append(v, fmt.Sprintf("%s: selects namespace %s, which is not rendered", at, ns))
		}
	}
	is := p.Spec.Selector.IssuerRef
	if is == nil || is.Name == nil || is.Kind == nil || is.Group == nil ||
		strings.Contains(*is.Name+*is.Kind+*is.Group, "*") {
		v = append(v, at+": does not select one issuer by exact name, kind and group")
	}
	if hasValidations(p.Spec) || len(p.Spec.Plugins) > 0 {
		v = append(v, at+": uses CEL validations or plugins, which the checks cannot evaluate")
	}
	if ns == "" || len(v) > 0 {
		return v
	}
	a := p.Spec.Allowed
	if a == nil {
		return v
	}
	// A policy allows only what one Certificate of its namespace asks its
	// issuer for: approver-policy approves a request when one policy
	// allows each of its fields, each on its own, so a policy fitting two
	// Certificates at once approves one's names with the other's usages.
	// Each value is held to the Certificate the policy fits best (the
	// fewest values it allows beyond it).
	allowed := allowedValues(a)
	pooled := map[string][]string{}
	pooledCA := false
	var best map[string][]string
	var bestCert certRequest
	bestMiss := -1
	for _, r := range requests {
		if r.Namespace != ns || !selectsIssuer(p, r.Issuer) {
			continue
		}
		asked := asksOf(r)
		for f, vals := range asked {
			pooled[f] = append(pooled[f], vals...)
		}
		pooledCA = pooledCA || r.IsCA
		miss := 0
		for _, fv := range allowed {
			if !slices.Contains(asked[fv[0]], fv[1]) {
				miss++
			}
		}
		if isTrue(a.IsCA) && !r.IsCA {
			miss++
		}
		if bestMiss < 0 || miss < bestMiss {
			best, bestCert, bestMiss = asked, r, miss
		}
	}
	for _, fv := range allowed {
		switch {
		case !slices.Contains(pooled[fv[0]], fv[1]):
			v = append(v, fmt.Sprintf("%s: allows %s %q, which no Certificate of namespace %s asks its issuer for", at, fv[0], fv[1], ns))
		case !slices.Contains(best[fv[0]], fv[1]):
			v = append(v, fmt.Sprintf("%s: allows %s %q beyond %s, the Certificate it fits best: a policy fitting two Certificates approves one's names with the other's %s", at, fv[0], fv[1], bestCert.Certificate, fv[0]))
		}
	}
	switch {
	case isTrue(a.IsCA) && !pooledCA:
		v = append(v, fmt.Sprintf("%s: allows CA certificates, which no Certificate of namespace %s asks its issuer for: a CA could sign any identity", at, ns))
	case isTrue(a.IsCA) && !bestCert.IsCA:
		v = append(v, fmt.Sprintf("%s: allows CA certificates beyond %s, the Certificate it fits best: a CA could sign any identity", at, bestCert.Certificate))
	}
	return v
}

// asksOf is what r asks its issuer for, by approver-policy's field names.
func asksOf(r certRequest) map[string][]string {
	asked := map[string][]string{"commonName": {r.CommonName}, "subject.serialNumber": {r.Serial}, "usages": r.Usages}
	for _, k := range sanKinds {
		asked[k] = r.SANs[k]
	}
	for k, vals := range r.Subject {
		asked["subject."+k] = vals
	}
	return asked
}

// allowedValues lists what a policy allows by value, as (field, value)
// pairs in asksOf's field names.
func allowedValues(a *policyv1alpha1.CertificateRequestPolicyAllowed) [][2]string {
	var out [][2]string
	if a.CommonName != nil && a.CommonName.Value != nil {
		out = append(out, [2]string{"commonName", *a.CommonName.Value})
	}
	for _, k := range sanKinds {
		if s := allowedSAN(a, k); s != nil && s.Values != nil {
			for _, val := range *s.Values {
				out = append(out, [2]string{k, val})
			}
		}
	}
	if a.Subject != nil {
		for _, f := range subjectFields(a.Subject) {
			if f.allowed != nil && f.allowed.Values != nil {
				for _, val := range *f.allowed.Values {
					out = append(out, [2]string{"subject." + f.name, val})
				}
			}
		}
		if s := a.Subject.SerialNumber; s != nil && s.Value != nil {
			out = append(out, [2]string{"subject.serialNumber", *s.Value})
		}
	}
	if a.Usages != nil {
		for _, u := range *a.Usages {
			out = append(out, [2]string{"usages", string(u)})
		}
	}
	return out
}

// hasValidations says whether a policy uses CEL anywhere.
func hasValidations(s policyv1alpha1.CertificateRequestPolicySpec) bool {
	a := s.Allowed
	if a == nil {
		return false
	}
	if a.CommonName != nil && len(a.CommonName.Validations) > 0 {
		return true
	}
	for _, k := range sanKinds {
		if x := allowedSAN(a, k); x != nil && len(x.Validations) > 0 {
			return true
		}
	}
	if a.Subject != nil {
		for _, f := range subjectFields(a.Subject) {
			if f.allowed != nil && len(f.allowed.Validations) > 0 {
				return true
			}
		}
		if a.Subject.SerialNumber != nil && len(a.Subject.SerialNumber.Validations) > 0 {
			return true
		}
	}
	return false
}

// policyBindings reports a binding that lets anyone but cert-manager's
// ServiceAccount use a policy.
func policyBindings(w *World) []string {
	var v []string
	for _, o := range w.Objects {
		var ref rbacv1.RoleRef
		var subjects []rbacv1.Subject
		switch b := o.Typed.(type) {
		case *rbacv1.RoleBinding:
			ref, subjects = b.RoleRef, b.Subjects
		case *rbacv1.ClusterRoleBinding:
			ref, subjects = b.RoleRef, b.Subjects
		default:
			continue
		}
		var rules []rbacv1.PolicyRule
		if r, ok := w.get(ref.Kind, map[string]string{"Role": o.Namespace}[ref.Kind], ref.Name); ok {
			switch role := r.Typed.(type) {
			case *rbacv1.Role:
				rules = role.Rules
			case *rbacv1.ClusterRole:
				rules = role.Rules
			}
		}
		if !slices.ContainsFunc(rules, grantsUseAny) {
			continue
		}
		for _, s := range subjects {
			if s.Kind != rbacv1.ServiceAccountKind || s.Name != CertManagerServiceAccount || s.Namespace != CertManagerNamespace {
				v = append(v, fmt.Sprintf("%s: lets %s %s use CertificateRequestPolicies, want cert-manager's ServiceAccount alone", o, s.Kind, s.Name))
			}
		}
	}
	return v
}

// wildcardContains says whether a pattern of patterns matches s.
func wildcardContains(patterns []string, s string) bool {
	return slices.ContainsFunc(patterns, func(p string) bool { return wildcardMatch(p, s) })
}

// wildcardMatch matches s against pattern as approver-policy does: '*'
// stands for any run of characters, even none; nothing else is special.
func wildcardMatch(pattern, s string) bool {
	if pattern == "" {
		return s == ""
	}
	head, rest, star := strings.Cut(pattern, "*")
	if !star {
		return pattern == s
	}
	if !strings.HasPrefix(s, head) {
		return false
	}
	s = s[len(head):]
	for {
		if rest == "" || wildcardMatch(rest, s) {
			return true
		}
		if s == "" {
			return false
		}
		s = s[1:]
	}
}
