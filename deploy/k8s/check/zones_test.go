package check

import (
	"slices"
	"strings"
	"testing"

	cnpgv1 "github.com/cloudnative-pg/cloudnative-pg/api/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// constraint is the pod spec's topology spread constraint over key.
func constraint(t *testing.T, spec *corev1.PodSpec, key string) *corev1.TopologySpreadConstraint {
	t.Helper()
	for i := range spec.TopologySpreadConstraints {
		if spec.TopologySpreadConstraints[i].TopologyKey == key {
			return &spec.TopologySpreadConstraints[i]
		}
	}
	t.Fatalf("no topology spread constraint over %s", key)
	return nil
}

func dropConstraint(spec *corev1.PodSpec, key string) {
	spec.TopologySpreadConstraints = slices.DeleteFunc(spec.TopologySpreadConstraints, func(c corev1.TopologySpreadConstraint) bool {
		return c.TopologyKey == key
	})
}

// TestZoneChecksCatch drops or weakens the GTR's, a cell's, NATS's and a
// cell's Postgres's spread over zones (and nodes), one way at a time, and
// expects each to be reported (and, where given, not the others).
func TestZoneChecksCatch(t *testing.T) {
	base := renderAll(t, deployDir)
	if v := CheckZones(NewWorld(base)); len(v) != 0 {
		t.Fatalf("the committed manifests: %v", v)
	}
	gtr := func(name string, change func(spec *corev1.PodSpec)) []Object {
		return withObject(t, base, "Deployment", GTRNamespace, name, func(d *appsv1.Deployment) { change(&d.Spec.Template.Spec) })
	}
	cell := func(change func(spec *corev1.PodSpec)) []Object {
		return withObject(t, base, "Deployment", "cell-a", "cell", func(d *appsv1.Deployment) { change(&d.Spec.Template.Spec) })
	}
	nats := func(change func(spec *corev1.PodSpec)) []Object {
		return withObject(t, base, "StatefulSet", NATSNamespace, "nats", func(s *appsv1.StatefulSet) { change(&s.Spec.Template.Spec) })
	}
	cluster := func(change func(a *cnpgv1.AffinityConfiguration)) []Object {
		return withObject(t, base, "Cluster", "cell-b", "postgres", func(c *cnpgv1.Cluster) { change(&c.Spec.Affinity) })
	}
	const (
		gtrWhy  = "a lost zone may take every replica of this access point"
		cellWhy = "a lost zone may take every instance of the cell"
		natsWhy = "a lost zone may take two of the three servers, and the JetStream quorum with them"
		pgWhy   = "a primary and its synchronous standby may share a zone"
	)
	cases := []struct {
		name  string
		objs  []Object
		wants []string
		nots  []string
	}{
		{"GTR not spread over zones", gtr("gtr", func(s *corev1.PodSpec) { dropConstraint(s, ZoneKey) }),
			[]string{"Deployment cellpay-gtr/gtr: no topology spread over topology.kubernetes.io/zone: " + gtrWhy}, nil},
		{"backup GTR spread by node only", gtr("gtr-backup", func(s *corev1.PodSpec) { constraint(t, s, ZoneKey).TopologyKey = HostKey }),
			[]string{"Deployment cellpay-gtr/gtr-backup: no topology spread over topology.kubernetes.io/zone"}, nil},
		{"GTR skewed", gtr("gtr", func(s *corev1.PodSpec) { constraint(t, s, ZoneKey).MaxSkew = 2 }),
			[]string{"Deployment cellpay-gtr/gtr: topology spread over topology.kubernetes.io/zone: maxSkew 2, want 1: " + gtrWhy}, nil},
		{"GTR spread over both access points together", gtr("gtr-backup", func(s *corev1.PodSpec) {
			constraint(t, s, ZoneKey).LabelSelector = &metav1.LabelSelector{MatchLabels: map[string]string{NameLabel: "gtr"}}
		}), []string{"Deployment cellpay-gtr/gtr-backup: topology spread over topology.kubernetes.io/zone: its labelSelector also selects cellpay-gtr/gtr: " + gtrWhy}, nil},
		{"GTR spread counting no pod", gtr("gtr", func(s *corev1.PodSpec) { constraint(t, s, ZoneKey).LabelSelector = nil }),
			[]string{"Deployment cellpay-gtr/gtr: topology spread over topology.kubernetes.io/zone: its labelSelector does not select the workload's pods"}, nil},
		{"GTR per node dropped", gtr("gtr-backup", func(s *corev1.PodSpec) { dropConstraint(s, HostKey) }),
			[]string{"Deployment cellpay-gtr/gtr-backup: no topology spread over kubernetes.io/hostname: a lost node may take several replicas"}, nil},
		{"GTR spread over zones required", gtr("gtr", func(s *corev1.PodSpec) { constraint(t, s, ZoneKey).WhenUnsatisfiable = corev1.DoNotSchedule }),
			[]string{"Deployment cellpay-gtr/gtr: topology spread over topology.kubernetes.io/zone: whenUnsatisfiable DoNotSchedule, want only ScheduleAnyway: a replacement would wait, Pending"},
			[]string{"no topology spread over topology.kubernetes.io/zone"}},
		{"GTR with a required spread beside the preferred one", gtr("gtr-backup", func(s *corev1.PodSpec) {
			c := *constraint(t, s, ZoneKey)
			c.WhenUnsatisfiable = corev1.DoNotSchedule
			s.TopologySpreadConstraints = append(s.TopologySpreadConstraints, c)
		}), []string{"Deployment cellpay-gtr/gtr-backup: topology spread over topology.kubernetes.io/zone: whenUnsatisfiable DoNotSchedule, want only ScheduleAnyway"}, nil},
		{"cell not spread over zones", cell(func(s *corev1.PodSpec) { dropConstraint(s, ZoneKey) }),
			[]string{"Deployment cell-a/cell: no topology spread over topology.kubernetes.io/zone: " + cellWhy}, nil},
		{"cell spread over zones if convenient", cell(func(s *corev1.PodSpec) { constraint(t, s, ZoneKey).WhenUnsatisfiable = corev1.ScheduleAnyway }),
			[]string{"Deployment cell-a/cell: topology spread over topology.kubernetes.io/zone: whenUnsatisfiable ScheduleAnyway, want DoNotSchedule: " + cellWhy}, nil},
		{"cell spread counting a lost zone's nodes", cell(func(s *corev1.PodSpec) { constraint(t, s, ZoneKey).NodeTaintsPolicy = nil }),
			[]string{"Deployment cell-a/cell: topology spread over topology.kubernetes.io/zone: nodeTaintsPolicy Ignore (the default), want Honor: " + cellWhy}, nil},
		{"cell skewed", cell(func(s *corev1.PodSpec) { constraint(t, s, ZoneKey).MaxSkew = 3 }),
			[]string{"Deployment cell-a/cell: topology spread over topology.kubernetes.io/zone: maxSkew 3, want 1: " + cellWhy}, nil},
		{"cell spread with its Postgres and Prometheus", cell(func(s *corev1.PodSpec) { constraint(t, s, ZoneKey).LabelSelector = &metav1.LabelSelector{} }),
			[]string{"Deployment cell-a/cell: topology spread over topology.kubernetes.io/zone: its labelSelector also selects cell-a/postgres"}, nil},
		{"cell spread over another workload's pods", cell(func(s *corev1.PodSpec) {
			constraint(t, s, ZoneKey).LabelSelector = &metav1.LabelSelector{MatchLabels: map[string]string{CNPGClusterLabel: "postgres"}}
		}), []string{"Deployment cell-a/cell: topology spread over topology.kubernetes.io/zone: its labelSelector does not select the workload's pods, its labelSelector also selects cell-a/postgres"}, nil},
		{"cell per node dropped", cell(func(s *corev1.PodSpec) { dropConstraint(s, HostKey) }),
			[]string{"Deployment cell-a/cell: no topology spread over kubernetes.io/hostname: a lost node may take several instances"}, nil},
		{"NATS not spread over zones", nats(func(s *corev1.PodSpec) { dropConstraint(s, ZoneKey) }),
			[]string{"StatefulSet cellpay-nats/nats: no topology spread over topology.kubernetes.io/zone: " + natsWhy}, nil},
		{"NATS spread over zones if convenient", nats(func(s *corev1.PodSpec) { constraint(t, s, ZoneKey).WhenUnsatisfiable = corev1.ScheduleAnyway }),
			[]string{"StatefulSet cellpay-nats/nats: topology spread over topology.kubernetes.io/zone: whenUnsatisfiable ScheduleAnyway, want DoNotSchedule: " + natsWhy}, nil},
		{"NATS skewed", nats(func(s *corev1.PodSpec) { constraint(t, s, ZoneKey).MaxSkew = 2 }),
			[]string{"StatefulSet cellpay-nats/nats: topology spread over topology.kubernetes.io/zone: maxSkew 2, want 1: " + natsWhy}, nil},
		{"NATS spread with the replicator", nats(func(s *corev1.PodSpec) {
			constraint(t, s, ZoneKey).LabelSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"app.kubernetes.io/part-of": "cellpay"}}
		}), []string{"StatefulSet cellpay-nats/nats: topology spread over topology.kubernetes.io/zone: its labelSelector also selects cellpay-nats/replicator"}, nil},
		{"NATS per node dropped", nats(func(s *corev1.PodSpec) { dropConstraint(s, HostKey) }),
			[]string{"StatefulSet cellpay-nats/nats: no topology spread over kubernetes.io/hostname"}, nil},
		{"NATS blind to a zone without nodes", nats(func(s *corev1.PodSpec) { constraint(t, s, ZoneKey).MinDomains = nil }),
			[]string{"StatefulSet cellpay-nats/nats: topology spread over topology.kubernetes.io/zone: minDomains unset, want 3: " + natsWhy}, nil},
		{"NATS content with two zones", nats(func(s *corev1.PodSpec) { constraint(t, s, ZoneKey).MinDomains = new(int32(2)) }),
			[]string{"StatefulSet cellpay-nats/nats: topology spread over topology.kubernetes.io/zone: minDomains 2, want 3: " + natsWhy}, nil},
		{"Postgres apart by node only", cluster(func(a *cnpgv1.AffinityConfiguration) { a.TopologyKey = HostKey }),
			[]string{"Cluster cell-b/postgres: affinity.topologyKey is kubernetes.io/hostname, want topology.kubernetes.io/zone: " + pgWhy}, nil},
		{"Postgres apart if convenient", cluster(func(a *cnpgv1.AffinityConfiguration) { a.PodAntiAffinityType = cnpgv1.PodAntiAffinityTypePreferred }),
			[]string{"Cluster cell-b/postgres: affinity.podAntiAffinityType is preferred, want required: " + pgWhy}, nil},
		{"Postgres anti-affinity off", cluster(func(a *cnpgv1.AffinityConfiguration) { a.EnablePodAntiAffinity = new(false) }),
			[]string{"Cluster cell-b/postgres: affinity.enablePodAntiAffinity is false: " + pgWhy}, nil},
		{"Postgres at CNPG's defaults", cluster(func(a *cnpgv1.AffinityConfiguration) { *a = cnpgv1.AffinityConfiguration{} }),
			[]string{"Cluster cell-b/postgres: affinity.topologyKey is kubernetes.io/hostname (the default), want topology.kubernetes.io/zone",
				"Cluster cell-b/postgres: affinity.podAntiAffinityType is preferred (the default), want required"}, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := strings.Join(Check(c.objs), "\n")
			for _, want := range c.wants {
				if !strings.Contains(got, want) {
					t.Errorf("no violation %q; got:\n%s", want, got)
				}
			}
			for _, not := range c.nots {
				if strings.Contains(got, not) {
					t.Errorf("violation %q reported; got:\n%s", not, got)
				}
			}
		})
	}
	// A weaker constraint beside the one the checks want weakens nothing:
	// the scheduler holds a pod to all of them.
	extra := nats(func(s *corev1.PodSpec) {
		c := *constraint(t, s, ZoneKey)
		c.MaxSkew, c.WhenUnsatisfiable = 2, corev1.ScheduleAnyway
		s.TopologySpreadConstraints = append(s.TopologySpreadConstraints, c)
	})
	if v := CheckZones(NewWorld(extra)); len(v) != 0 {
		t.Errorf("a second, weaker constraint: %v", v)
	}
	extra = cell(func(s *corev1.PodSpec) {
		c := *constraint(t, s, ZoneKey)
		c.WhenUnsatisfiable, c.NodeTaintsPolicy = corev1.ScheduleAnyway, nil
		s.TopologySpreadConstraints = append(s.TopologySpreadConstraints, c)
	})
	if v := CheckZones(NewWorld(extra)); len(v) != 0 {
		t.Errorf("a second, weaker constraint on a cell: %v", v)
	}
}
