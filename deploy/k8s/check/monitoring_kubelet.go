package check

import (
	"fmt"
	"regexp"
	"slices"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/yaml"
)

// The kubelets' scrape: the storage alerts (CellpayDatabaseVolumeFilling,
// CellpayDatabaseVolumeLow) read kubelet_volume_stats_*, which only a
// node's kubelet serves. A kubelet is no pod, so the global Prometheus
// scrapes it through one scrape config of its own (additionalScrapeConfigs)
// rather than a PodMonitor.
const (
	// KubeletJob is the kubelets' scrape job, as the rules name it.
	KubeletJob = "kubelet"
	// KubeletPort is the kubelet's HTTPS port on every node.
	KubeletPort = 10250
	// serviceAccountDir is where a pod's service account token and the
	// cluster's CA are mounted.
	serviceAccountDir = "/var/run/secrets/kubernetes.io/serviceaccount/"
)

// kubeletMetrics are the kubelet's series the rules read; otherMetrics,
// some the scrape must drop.
var (
	kubeletMetrics = []string{"kubelet_volume_stats_available_bytes", "kubelet_volume_stats_capacity_bytes"}
	otherMetrics   = []string{"kubelet_running_pods", "container_cpu_usage_seconds_total", "rest_client_requests_total"}
)

// scrapeConfig is the part of a Prometheus scrape config the check reads.
type scrapeConfig struct {
	JobName       string `json:"job_name"`
	Scheme        string `json:"scheme"`
	BearerToken   string `json:"bearer_token"`
	Authorization *struct {
		Credentials     string `json:"credentials"`
		CredentialsFile string `json:"credentials_file"`
	} `json:"authorization"`
	TLSConfig *struct {
		CAFile             string `json:"ca_file"`
		InsecureSkipVerify bool   `json:"insecure_skip_verify"`
	} `json:"tls_config"`
	KubernetesSDConfigs []struct {
		Role string `json:"role"`
	} `json:"kubernetes_sd_configs"`
	MetricRelabelConfigs []struct {
		SourceLabels []string `json:"source_labels"`
		Regex        string   `json:"regex"`
		Action       string   `json:"action"`
	} `json:"metric_relabel_configs"`
}

// kubeletScrape checks the global Prometheus p's scrape of the kubelets:
//
//   - its additionalScrapeConfigs is a key of a Secret rendered in its
//     namespace, holding one scrape config: job kubelet, over Kubernetes'
//     node discovery, over HTTPS, authenticated by the pod's service
//     account token (a file, never a token in the config), verifying the
//     kubelet's certificate against the cluster's CA;
//   - it keeps the volume stats the rules read and drops the rest;
//   - the account may discover the nodes and read their kubelets' metrics
//     (nodes: get, list, watch; nodes/metrics: get) and nothing else
//     cluster-wide: never nodes/proxy, which reaches every pod's exec;
//   - its egress lets it reach the kubelets' port (KubeletPort).
func kubeletScrape(w *World, at string, p *monitoringv1.Prometheus) []string {
	ref := p.Spec.AdditionalScrapeConfigs
	if ref == nil {
		return []string{at + ": no additionalScrapeConfigs: the kubelets' volume stats, which the storage alerts read, are not scraped"}
	}
	so, ok := w.get("Secret", p.Namespace, ref.Name)
	if !ok {
		return []string{fmt.Sprintf("%s: additionalScrapeConfigs names Secret %s, which is not rendered in %s", at, ref.Name, p.Namespace)}
	}
	raw, ok := secretData(so.Typed.(*corev1.Secret))[ref.Key]
	if !ok {
		return []string{fmt.Sprintf("%s: additionalScrapeConfigs names key %s of %s, which has no such key", at, ref.Key, so)}
	}
	var cfgs []scrapeConfig
	if err := yaml.Unmarshal([]byte(raw), &cfgs); err != nil {
		return []string{fmt.Sprintf("%s: key %s: %v", so, ref.Key, err)}
	}
	if len(cfgs) != 1 || cfgs[0].JobName != KubeletJob {
		var jobs []string
		for _, c := range cfgs {
			jobs = append(jobs, c.JobName)
		}
		return []string{fmt.Sprintf("%s: key %s holds the jobs %q, want %s alone: everything else is a PodMonitor's", so, ref.Key, jobs, KubeletJob)}
	}
	c := cfgs[0]
	at = fmt.Sprintf("%s: job %s", so, KubeletJob)
	var v []string
	if len(c.KubernetesSDConfigs) != 1 || c.KubernetesSDConfigs[0].Role != "node" {
		v = append(v, at+": not discovered as Kubernetes' nodes (kubernetes_sd_configs: [{role: node}])")
	}
	if c.Scheme != "https" {
		v = append(v, fmt.Sprintf("%s: scheme %q, want https (the kubelet serves HTTPS only, and the token must not cross the network in the clear)", at, c.Scheme))
	}
	if c.BearerToken != "" || c.Authorization == nil || c.Authorization.Credentials != "" || c.Authorization.CredentialsFile != serviceAccountDir+"token" {
		v = append(v, fmt.Sprintf("%s: want authorization.credentials_file %stoken (the pod's service account token), and no token in the config", at, serviceAccountDir))
	}
	if c.TLSConfig == nil || c.TLSConfig.InsecureSkipVerify || c.TLSConfig.CAFile == "" {
		v = append(v, at+": does not verify the kubelet's certificate (tls_config.ca_file, no insecure_skip_verify): the token would go to whoever answers on the node's address")
	}
	kept := false
	for _, r := range c.MetricRelabelConfigs {
		if r.Action != "keep" || !slices.Equal(r.SourceLabels, []string{"__name__"}) {
			continue
		}
		re, err := regexp.Compile("^(?:" + r.Regex + ")$")
		if err != nil {
			v = append(v, fmt.Sprintf("%s: metric_relabel_configs regex %q: %v", at, r.Regex, err))
			break
		}
		kept = true
		for _, m := range kubeletMetrics {
			if !re.MatchString(m) {
				v = append(v, fmt.Sprintf("%s: drops %s, which the storage alerts read", at, m))
			}
		}
		for _, m := range otherMetrics {
			if re.MatchString(m) {
				v = append(v, fmt.Sprintf("%s: keeps %s: only the volume stats are wanted", at, m))
			}
		}
		break
	}
	if !kept {
		v = append(v, at+": keeps every series of every kubelet: want a metric_relabel_configs keep of the volume stats alone")
	}
	v = append(v, kubeletRBAC(w, p)...)
	if prom, ok := w.pod(p.Namespace, "prometheus-"+p.Name); ok && len(w.Net.egressAddrs(prom, KubeletPort, corev1.ProtocolTCP)) == 0 {
		v = append(v, fmt.Sprintf("%s cannot reach the kubelets on %d/TCP", prom, KubeletPort))
	}
	return v
}

// kubeletRBAC checks what p's service account may do cluster-wide: what the
// kubelets' scrape needs, and nothing more.
func kubeletRBAC(w *World, p *monitoringv1.Prometheus) []string {
	sa := p.Spec.ServiceAccountName
	if sa == "" {
		sa = "default"
	}
	var rules []rbacv1.PolicyRule
	for _, o := range w.Find("ClusterRoleBinding", "") {
		b := o.Typed.(*rbacv1.ClusterRoleBinding)
		if !slices.ContainsFunc(b.Subjects, func(s rbacv1.Subject) bool {
			return s.Kind == rbacv1.ServiceAccountKind && s.Name == sa && s.Namespace == p.Namespace
		}) {
			continue
		}
		if ro, ok := w.get("ClusterRole", "", b.RoleRef.Name); ok && b.RoleRef.Kind == "ClusterRole" {
			rules = append(rules, ro.Typed.(*rbacv1.ClusterRole).Rules...)
		} else {
			return []string{fmt.Sprintf("%s: binds %s %s, which is not rendered", o, b.RoleRef.Kind, b.RoleRef.Name)}
		}
	}
	at := fmt.Sprintf("ServiceAccount %s/%s", p.Namespace, sa)
	granted := map[string]bool{}
	var v []string
	for _, r := range rules {
		if len(r.NonResourceURLs) > 0 || len(r.ResourceNames) > 0 || !slices.Equal(r.APIGroups, []string{""}) {
			v = append(v, fmt.Sprintf("%s may %v %v%v of API groups %q cluster-wide: the kubelets' scrape needs nodes and nodes/metrics alone", at, r.Verbs, r.Resources, r.NonResourceURLs, r.APIGroups))
			continue
		}
		for _, res := range r.Resources {
			for _, verb := range r.Verbs {
				switch {
				case res == "nodes" && slices.Contains([]string{"get", "list", "watch"}, verb), res == "nodes/metrics" && verb == "get":
					granted[verb+" "+res] = true
				default:
					v = append(v, fmt.Sprintf("%s may %s %s cluster-wide: the kubelets' scrape needs to get, list and watch nodes and get nodes/metrics, nothing more", at, verb, res))
				}
			}
		}
	}
	for _, need := range []string{"list nodes", "watch nodes", "get nodes/metrics"} {
		if !granted[need] {
			v = append(v, fmt.Sprintf("%s may not %s cluster-wide: the kubelets' scrape needs it", at, need))
		}
	}
	return v
}
