package check

import (
	"fmt"
	"slices"

	cmv1 "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// The partners' two access points (pkg/client fails over between them).
const (
	// AccessPointLabel tells the primary's GTR pods from the backup's.
	AccessPointLabel = "cellpay.io/access-point"
	backupGTR        = "gtr-backup"
)

// CheckAccessPoints checks the second access point: a Deployment
// gtr-backup whose pods are the primary's but for their access-point
// label (so the NetworkPolicies, which select app.kubernetes.io/name: gtr,
// give it exactly the primary's access, and the trust checks of the
// primary hold for it), Services gtr and gtr-backup that each select one
// access point's pods only and expose both partners' ports (gRPC 7070,
// REST 7060) to those pods' ports of the same numbers, and the GTR's
// certificate naming both.
func CheckAccessPoints(w *World) []string {
	prim, ok1 := w.get("Deployment", GTRNamespace, gtrService)
	back, ok2 := w.get("Deployment", GTRNamespace, backupGTR)
	if !ok1 {
		return nil // reported by CheckPlatform
	}
	if !ok2 {
		return []string{"no Deployment " + backupGTR + " in " + GTRNamespace + ": partners have one access point"}
	}
	var v []string
	pd, bd := prim.Typed.(*appsv1.Deployment), back.Typed.(*appsv1.Deployment)
	pl, bl := pd.Spec.Template.Labels, bd.Spec.Template.Labels
	if pl[AccessPointLabel] != "primary" || bl[AccessPointLabel] != "backup" {
		v = append(v, fmt.Sprintf("the GTR Deployments' pods are labelled %s=%q and %q, want primary and backup", AccessPointLabel, pl[AccessPointLabel], bl[AccessPointLabel]))
	}
	if bl[NameLabel] != "gtr" {
		v = append(v, "gtr-backup's pods are not app.kubernetes.io/name: gtr: the GTR's NetworkPolicies do not apply to them")
	}
	if pd.Spec.Selector.MatchLabels[AccessPointLabel] != "primary" || bd.Spec.Selector.MatchLabels[AccessPointLabel] != "backup" {
		v = append(v, "the GTR Deployments' selectors overlap: each must select its own access point's pods")
	}
	// Each spreads its own pods: the constraints' selectors name the
	// access point, the rest must be equal.
	bspec := *bd.Spec.Template.Spec.DeepCopy()
	bspec.TopologySpreadConstraints = pd.Spec.Template.Spec.TopologySpreadConstraints
	if !equality.Semantic.DeepEqual(pd.Spec.Template.Spec, bspec) {
		v = append(v, "gtr-backup's pod spec differs from gtr's: the backup must be the same GTR")
	}
	if replicas(back) < 2 {
		v = append(v, fmt.Sprintf("gtr-backup has %d replicas, want several", replicas(back)))
	}
	for name, want := range map[string]string{gtrService: "primary", backupGTR: "backup"} {
		o, ok := w.get("Service", GTRNamespace, name)
		if !ok {
			v = append(v, "no Service "+name+" for the "+want+" access point")
			continue
		}
		svc := o.Typed.(*corev1.Service)
		if got := svc.Spec.Selector[AccessPointLabel]; got != want {
			v = append(v, fmt.Sprintf("Service %s selects %s=%q, want %q", name, AccessPointLabel, got, want))
		}
		// The Service of an access point is named after its Deployment.
		dep := pd
		if name == backupGTR {
			dep = bd
		}
		for _, l := range gtrPartnerListeners {
			if !servesPort(svc, containerPorts(dep.Spec.Template.Spec), l.port) {
				v = append(v, fmt.Sprintf("Service %s does not expose the partners' %s port %d/TCP to its pods' port %d", name, l.what, l.port, l.port))
			}
		}
	}
	if c, ok := w.get("Certificate", GTRNamespace, gtrService); ok {
		names := c.Typed.(*cmv1.Certificate).Spec.DNSNames
		for _, n := range []string{backupGTR, backupGTR + "." + GTRNamespace + ".svc"} {
			if !slices.Contains(names, n) {
				v = append(v, "the GTR's certificate does not name "+n+": partners' clients cannot verify the backup access point")
			}
		}
	}
	return v
}

// servesPort says whether svc exposes port over TCP, at the same number,
// to the pods' container port of that number (its targetPort naming it, or
// giving its number, or left to default to port).
func servesPort(svc *corev1.Service, ports []corev1.ContainerPort, port int32) bool {
	for _, sp := range svc.Spec.Ports {
		if sp.Port != port || sp.Protocol != "" && sp.Protocol != corev1.ProtocolTCP {
			continue
		}
		for _, cp := range ports {
			if cp.ContainerPort != port || cp.Protocol != corev1.ProtocolTCP {
				continue
			}
			switch tp := sp.TargetPort; {
			case tp.Type == intstr.String && tp.StrVal == cp.Name,
				tp.Type == intstr.Int && (tp.IntVal == 0 || tp.IntVal == port):
				return true
			}
		}
	}
	return false
}
