package check

import (
	"slices"
	"strings"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestKubeletScrapeChecksCatch breaks the global Prometheus's scrape of the
// kubelets one way at a time (its config, its account's rights, its way
// out) and expects each to be reported.
func TestKubeletScrapeChecksCatch(t *testing.T) {
	base := renderAll(t, deployDir)
	if v := Check(base); len(v) != 0 {
		t.Fatalf("the committed manifests: %v", v)
	}
	const secret = "Secret cellpay-monitoring/prometheus-kubelet-scrape"
	scrape := func(old, new string) []Object {
		return withObject(t, base, "Secret", MonitoringNamespace, "prometheus-kubelet-scrape", func(s *corev1.Secret) {
			cfg := s.StringData["kubelet.yaml"]
			if !strings.Contains(cfg, old) {
				t.Fatalf("the scrape config has no %q:\n%s", old, cfg)
			}
			s.StringData["kubelet.yaml"] = strings.Replace(cfg, old, new, 1)
		})
	}
	role := func(change func(r *rbacv1.ClusterRole)) []Object {
		return withObject(t, base, "ClusterRole", "", "cellpay-prometheus-kubelet", change)
	}
	cases := []brokenCase{
		{"not scraped", withObject(t, base, monitoringv1.PrometheusesKind, MonitoringNamespace, GlobalPrometheus, func(p *monitoringv1.Prometheus) {
			p.Spec.AdditionalScrapeConfigs = nil
		}), []string{"Prometheus cellpay-monitoring/global: no additionalScrapeConfigs: the kubelets' volume stats"}},
		{"its Secret gone", without(base, "Secret", MonitoringNamespace, "prometheus-kubelet-scrape"),
			[]string{"Prometheus cellpay-monitoring/global: additionalScrapeConfigs names Secret prometheus-kubelet-scrape, which is not rendered"}},
		{"another key", withObject(t, base, monitoringv1.PrometheusesKind, MonitoringNamespace, GlobalPrometheus, func(p *monitoringv1.Prometheus) {
			p.Spec.AdditionalScrapeConfigs.Key = "other.yaml"
		}), []string{"names key other.yaml of " + secret + ", which has no such key"}},
		{"a second job", scrape("- job_name: kubelet\n", "- job_name: cadvisor\n  kubernetes_sd_configs: [{role: node}]\n- job_name: kubelet\n"),
			[]string{secret + `: key kubelet.yaml holds the jobs ["cadvisor" "kubelet"], want kubelet alone`}},
		{"pods discovered", scrape("- role: node", "- role: pod"),
			[]string{secret + ": job kubelet: not discovered as Kubernetes' nodes"}},
		{"in the clear", scrape("scheme: https", "scheme: http"),
			[]string{secret + `: job kubelet: scheme "http", want https`}},
		{"a token in the config", scrape("credentials_file: /var/run/secrets/kubernetes.io/serviceaccount/token", "credentials: eyJhbGciOi"),
			[]string{secret + ": job kubelet: want authorization.credentials_file /var/run/secrets/kubernetes.io/serviceaccount/token"}},
		{"any certificate taken", scrape("tls_config:\n", "tls_config:\n    insecure_skip_verify: true\n"),
			[]string{secret + ": job kubelet: does not verify the kubelet's certificate"}},
		{"every series kept", scrape("action: keep", "action: replace"),
			[]string{secret + ": job kubelet: keeps every series of every kubelet"}},
		{"too much kept", scrape("regex: kubelet_volume_stats_(available|capacity|used)_bytes", "regex: kubelet_.*"),
			[]string{secret + ": job kubelet: keeps kubelet_running_pods"}},
		{"too little kept", scrape("regex: kubelet_volume_stats_(available|capacity|used)_bytes", "regex: kubelet_volume_stats_available_bytes"),
			[]string{secret + ": job kubelet: drops kubelet_volume_stats_capacity_bytes, which the storage alerts read"}},
		{"the kubelet's proxy", role(func(r *rbacv1.ClusterRole) { r.Rules[1].Resources = append(r.Rules[1].Resources, "nodes/proxy") }),
			[]string{"ServiceAccount cellpay-monitoring/prometheus may get nodes/proxy cluster-wide"}},
		{"every Secret", role(func(r *rbacv1.ClusterRole) {
			r.Rules = append(r.Rules, rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"list"}})
		}), []string{"ServiceAccount cellpay-monitoring/prometheus may list secrets cluster-wide"}},
		{"another API group", role(func(r *rbacv1.ClusterRole) {
			r.Rules = append(r.Rules, rbacv1.PolicyRule{APIGroups: []string{"*"}, Resources: []string{"*"}, Verbs: []string{"*"}})
		}), []string{`ServiceAccount cellpay-monitoring/prometheus may [*] [*][] of API groups ["*"] cluster-wide`}},
		{"no rights", without(base, "ClusterRoleBinding", "", "cellpay-prometheus-kubelet"),
			[]string{"ServiceAccount cellpay-monitoring/prometheus may not list nodes cluster-wide", "may not get nodes/metrics cluster-wide"}},
		{"shut out of the kubelets", withObject(t, base, "NetworkPolicy", MonitoringNamespace, "prometheus-egress", func(p *networkingv1.NetworkPolicy) {
			p.Spec.Egress = slices.DeleteFunc(p.Spec.Egress, func(r networkingv1.NetworkPolicyEgressRule) bool {
				return len(r.Ports) == 1 && r.Ports[0].Port.IntValue() == KubeletPort
			})
		}), []string{"cellpay-monitoring/prometheus-global cannot reach the kubelets on 10250/TCP"}},
		{"more than the kubelets through its own config", withObject(t, base, monitoringv1.PrometheusesKind, MonitoringNamespace, GlobalPrometheus, func(p *monitoringv1.Prometheus) {
			p.Spec.ServiceMonitorSelector = &metav1.LabelSelector{}
		}), []string{"Prometheus cellpay-monitoring/global: scrapes more than PodMonitors and the kubelets"}},
	}
	checkBroken(t, cases)
}
