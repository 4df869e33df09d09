package check

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"text/template"
)

// The overlay of one cell. overlays/cell-a..c are exactly this; the tests
// hold them to it, so that a generated cell is what the committed ones are.
var overlayTemplate = template.Must(template.New("overlay").Parse(`# Cell {{.}}. Made by scripts/k8s-new-cell.sh; the GTR finds it through its line
# in overlays/platform/gtr.yaml.
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
namespace: {{.}}
resources:
  - ../../base/cell
  - namespace.yaml
  - certificate.yaml
  - issuance-policy.yaml
labels:
  - pairs: {cellpay.io/cell: {{.}}}
    includeTemplates: true
secretGenerator:
  # The passwords of this cell's Postgres roles (base/cell/postgres.yaml),
  # hex so that they are URL-safe. Made by scripts/k8s-secrets.sh; not in git.
  - name: cellpay-owner
    type: kubernetes.io/basic-auth
    literals:
      - username=cellpay_owner
    files:
      - password=secrets/cellpay-owner-password
  - name: cellpay-app
    type: kubernetes.io/basic-auth
    literals:
      - username=cellpay_app
    files:
      - password=secrets/cellpay-app-password
`))

// The cell's certificate: its identity on the internal hops and the names
// of its Service, which the GTR dials.
var certificateTemplate = template.Must(template.New("certificate").Parse(`# Cell {{.}}'s certificate for mutual TLS with the GTR (it serves) and the
# issuer (it dials): identity spiffe://cellpay.internal/cell/{{.}}, the names
# of Service cell, and {{.}}.cellpay.internal. Signed by the internal CA;
# into Secret cell-tls, mounted whole by the cell and re-read every 10 s.
apiVersion: cert-manager.io/v1
kind: Certificate
metadata:
  name: cell
  labels: {app.kubernetes.io/name: cell, app.kubernetes.io/part-of: cellpay}
spec:
  secretName: cell-tls
  secretTemplate:
    labels: {app.kubernetes.io/name: cell, app.kubernetes.io/part-of: cellpay}
  commonName: {{.}}
  uris: [spiffe://cellpay.internal/cell/{{.}}]
  dnsNames:
    - cell
    - cell.{{.}}
    - cell.{{.}}.svc
    - cell.{{.}}.svc.cluster.local
    - {{.}}.cellpay.internal
  duration: 2160h
  renewBefore: 720h
  privateKey:
    algorithm: ECDSA
    size: 256
    rotationPolicy: Always
  usages: [server auth, client auth, digital signature]
  revisionHistoryLimit: 3
  issuerRef: {group: cert-manager.io, kind: ClusterIssuer, name: cellpay-internal-ca}
`))

// Who may obtain the cell's certificate: this namespace alone, from the
// internal CA, for the certificate's names; cert-manager's controller is
// bound to use the policy here only.
var issuancePolicyTemplate = template.Must(template.New("issuance-policy").Parse(`# Who may obtain cell {{.}}'s certificate (certificate.yaml): requests in
# namespace {{.}} only, from the internal CA only, for exactly these names and
# usages. No other namespace may obtain spiffe://cellpay.internal/cell/{{.}}
# (README.md, "Who may obtain a certificate"; base/nats says how a policy
# and its Role work). Policies are cluster-scoped: kustomize stamps the
# overlay's namespace on this one too, and the API server drops it.
apiVersion: policy.cert-manager.io/v1alpha1
kind: CertificateRequestPolicy
metadata:
  name: {{.}}.cell
  labels: {app.kubernetes.io/name: cell, app.kubernetes.io/part-of: cellpay}
spec:
  selector:
    namespace: {matchNames: [{{.}}]}
    issuerRef: {group: cert-manager.io, kind: ClusterIssuer, name: cellpay-internal-ca}
  allowed:
    commonName: {value: {{.}}, required: true}
    uris: {values: ["spiffe://cellpay.internal/cell/{{.}}"], required: true}
    dnsNames:
      values:
        - cell
        - cell.{{.}}
        - cell.{{.}}.svc
        - cell.{{.}}.svc.cluster.local
        - {{.}}.cellpay.internal
    usages: [server auth, client auth, digital signature]
---
# cert-manager's controller may use the policy for requests in this
# namespace, and only here.
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata:
  name: cellpay-issuance.cell
  labels: {app.kubernetes.io/part-of: cellpay}
rules:
  - apiGroups: [policy.cert-manager.io]
    resources: [certificaterequestpolicies]
    verbs: [use]
    resourceNames: [{{.}}.cell]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: cellpay-issuance.cell
  labels: {app.kubernetes.io/part-of: cellpay}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: cellpay-issuance.cell}
subjects:
  - {kind: ServiceAccount, name: cert-manager, namespace: cert-manager}
`))

var namespaceTemplate = template.Must(template.New("namespace").Parse(`apiVersion: v1
kind: Namespace
metadata:
  name: {{.}}
  labels:
    # The GTR's and the platform's policies select cells by this label.
    cellpay.io/role: cell
    pod-security.kubernetes.io/enforce: restricted
    pod-security.kubernetes.io/enforce-version: v1.37
`))

// cellName: a DNS label (it is a namespace and part of a DNS name).
var cellName = regexp.MustCompile(`^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$`)

// ErrCellExists is returned by NewCell for a cell that already has an
// overlay or a routing line.
var ErrCellExists = errors.New("cell exists")

// OverlayFiles returns the files of cell name's overlay, by file name.
func OverlayFiles(name string) (map[string][]byte, error) {
	if !cellName.MatchString(name) {
		return nil, fmt.Errorf("newcell: %q is not a DNS label (lower case letters, digits, '-')", name)
	}
	out := map[string][]byte{}
	for file, t := range map[string]*template.Template{
		"kustomization.yaml": overlayTemplate, "namespace.yaml": namespaceTemplate,
		"certificate.yaml": certificateTemplate, "issuance-policy.yaml": issuancePolicyTemplate,
	} {
		var b bytes.Buffer
		if err := t.Execute(&b, name); err != nil {
			return nil, err
		}
		out[file] = b.Bytes()
	}
	return out, nil
}

// NewCell adds cell name to the deploy/k8s tree at root: it writes
// overlays/NAME (with the policy that lets only its namespace obtain its
// certificate) and adds the cell's one line to the GTR's routing table
// (overlays/platform/gtr.yaml), raising the table's version. The cell joins
// pool main at weight 0, so that it takes no traffic until an operator
// restores it with a ramp (gtrctl restore NAME --over 10m).
func NewCell(root, name string) error {
	files, err := OverlayFiles(name)
	if err != nil {
		return err
	}
	dir := filepath.Join(root, "overlays", name)
	if _, err := os.Stat(dir); err == nil {
		return fmt.Errorf("newcell: %s: %w", dir, ErrCellExists)
	}
	table := filepath.Join(root, "overlays", "platform", "gtr.yaml")
	raw, err := os.ReadFile(table)
	if err != nil {
		return fmt.Errorf("newcell: %w", err)
	}
	updated, err := AddRoutingLine(string(raw), name)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("newcell: %w", err)
	}
	for file, data := range files {
		if err := os.WriteFile(filepath.Join(dir, file), data, 0o644); err != nil {
			return fmt.Errorf("newcell: %w", err)
		}
	}
	return os.WriteFile(table, []byte(updated), 0o644)
}

// RoutingLine is the GTR routing table's line for a new cell.
func RoutingLine(name string) string {
	return fmt.Sprintf(`  - {id: %s, addr: "%s", pool: main, weight: 0}`, name, CellAddr(name))
}

var versionLine = regexp.MustCompile(`(?m)^version: (\d+)$`)

// AddRoutingLine adds name's line after the last cell line of a routing
// table and raises its version by one.
func AddRoutingLine(table, name string) (string, error) {
	lines := strings.Split(table, "\n")
	last := -1
	for i, l := range lines {
		if strings.HasPrefix(l, "  - {id: ") {
			last = i
			if strings.HasPrefix(l, "  - {id: "+name+",") {
				return "", fmt.Errorf("newcell: %s in the routing table: %w", name, ErrCellExists)
			}
		}
	}
	if last < 0 {
		return "", errors.New("newcell: no cell lines (  - {id: ...}) in the routing table")
	}
	lines = append(lines[:last+1], append([]string{RoutingLine(name)}, lines[last+1:]...)...)
	out := strings.Join(lines, "\n")
	m := versionLine.FindStringSubmatch(out)
	if m == nil {
		return "", errors.New("newcell: no version line in the routing table")
	}
	n, _ := strconv.Atoi(m[1])
	return versionLine.ReplaceAllString(out, "version: "+strconv.Itoa(n+1)), nil
}
