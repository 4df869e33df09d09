package natsmon

import (
	"github.com/prometheus/client_golang/prometheus"
)

// The metrics, all gauges. Where prometheus-nats-exporter has a metric for
// the same value, natsmon uses its name (gnatsd_varz_* from /varz,
// gnatsd_healthz_status, jetstream_* from /jsz), so that dashboards and
// rules written for it read natsmon, and natsmon could be replaced by it;
// natsmon_* are natsmon's own. The labels differ from the exporter's:
// server is natsmon's name for the server (stable whether or not it
// answers), and a stream's are account and stream. deploy/monitoring's
// test reads the names from the NewDesc calls below: keep each a literal.
//
//	natsmon_server_up{server}                                1: /varz answered and decoded at the last poll
//	gnatsd_healthz_status{server}                            0: /healthz?js-enabled-only=true said ok; 1: anything else, no answer included (the exporter's sense)
//	gnatsd_varz_jetstream_config_max_storage{server}         JetStream's file storage limit, bytes
//	gnatsd_varz_jetstream_config_max_memory{server}          its memory limit, bytes
//	gnatsd_varz_jetstream_stats_storage{server}              file storage used, bytes
//	gnatsd_varz_jetstream_stats_memory{server}               memory used, bytes
//	gnatsd_varz_jetstream_stats_reserved_storage{server}     file storage reserved by streams' max_bytes
//	gnatsd_varz_jetstream_stats_reserved_memory{server}      memory reserved
//	gnatsd_varz_jetstream_meta_cluster_size{server}          the meta group's known size (1 for a server alone)
//	natsmon_meta_leader{server}                              1: this server sees a meta leader (a server alone is its own)
//	jetstream_stream_total_bytes{server,account,stream}      bytes of this server's replica of the stream
//	jetstream_stream_total_messages{server,account,stream}   its messages
//	natsmon_stream_max_bytes{server,account,stream,discard}  the stream's max_bytes, -1 for none; discard "new" (writes refused when full) or "old"
//	natsmon_stream_replicas{server,account,stream}           its configured replicas
//	natsmon_stream_leader{server,account,stream}             1: this server sees a leader of the stream's group
//	natsmon_stream_current_replicas{server,account,stream}   replicas current as this server sees them, the leader's included
var (
	descUp            = prometheus.NewDesc("natsmon_server_up", "1 when the server's /varz answered and decoded at natsmon's last poll.", serverLabels, nil)
	descHealthz       = prometheus.NewDesc("gnatsd_healthz_status", "0 when the server's /healthz?js-enabled-only=true said ok, 1 otherwise (no answer included), as prometheus-nats-exporter.", serverLabels, nil)
	descMaxStorage    = prometheus.NewDesc("gnatsd_varz_jetstream_config_max_storage", "JetStream's file storage limit on this server, bytes.", serverLabels, nil)
	descMaxMemory     = prometheus.NewDesc("gnatsd_varz_jetstream_config_max_memory", "JetStream's memory storage limit on this server, bytes.", serverLabels, nil)
	descStorage       = prometheus.NewDesc("gnatsd_varz_jetstream_stats_storage", "JetStream file storage used on this server, bytes.", serverLabels, nil)
	descMemory        = prometheus.NewDesc("gnatsd_varz_jetstream_stats_memory", "JetStream memory storage used on this server, bytes.", serverLabels, nil)
	descResStorage    = prometheus.NewDesc("gnatsd_varz_jetstream_stats_reserved_storage", "JetStream file storage reserved by streams' max_bytes on this server, bytes.", serverLabels, nil)
	descResMemory     = prometheus.NewDesc("gnatsd_varz_jetstream_stats_reserved_memory", "JetStream memory storage reserved by streams' max_bytes on this server, bytes.", serverLabels, nil)
	descClusterSize   = prometheus.NewDesc("gnatsd_varz_jetstream_meta_cluster_size", "The JetStream meta group's known size as this server reports it; 1 for a server alone.", serverLabels, nil)
	descMetaLeader    = prometheus.NewDesc("natsmon_meta_leader", "1 when this server sees a JetStream meta leader (a server alone is its own).", serverLabels, nil)
	descStreamBytes   = prometheus.NewDesc("jetstream_stream_total_bytes", "Bytes of this server's replica of the stream.", streamLabels, nil)
	descStreamMsgs    = prometheus.NewDesc("jetstream_stream_total_messages", "Messages of this server's replica of the stream.", streamLabels, nil)
	descStreamMax     = prometheus.NewDesc("natsmon_stream_max_bytes", "The stream's max_bytes, -1 for no limit; discard new: writes are refused past it, old: the oldest messages are dropped.", append(streamLabels, "discard"), nil)
	descStreamRepl    = prometheus.NewDesc("natsmon_stream_replicas", "The stream's configured replicas.", streamLabels, nil)
	descStreamLeader  = prometheus.NewDesc("natsmon_stream_leader", "1 when this server sees a leader of the stream's Raft group (a server alone leads its streams).", streamLabels, nil)
	descStreamCurrent = prometheus.NewDesc("natsmon_stream_current_replicas", "Replicas of the stream current as this server sees them, the leader included.", streamLabels, nil)
)

var (
	serverLabels = []string{"server"}
	streamLabels = []string{"server", "account", "stream"}
)

var allDescs = []*prometheus.Desc{descUp, descHealthz, descMaxStorage, descMaxMemory, descStorage, descMemory,
	descResStorage, descResMemory, descClusterSize, descMetaLeader, descStreamBytes, descStreamMsgs,
	descStreamMax, descStreamRepl, descStreamLeader, descStreamCurrent}

// Describe implements prometheus.Collector.
func (m *Monitor) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range allDescs {
		ch <- d
	}
}

// Collect implements prometheus.Collector: the last poll's samples, never
// a request to NATS.
func (m *Monitor) Collect(ch chan<- prometheus.Metric) {
	for _, s := range m.Samples() {
		Metrics(s, func(pm prometheus.Metric) { ch <- pm })
	}
}

// Metrics converts one sample to its metrics, calling emit for each.
func Metrics(s Sample, emit func(prometheus.Metric)) {
	name := s.Server.Name
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		// Label values were checked when decoded (valid UTF-8); a
		// metric that cannot be made is left out rather than panic.
		if pm, err := prometheus.NewConstMetric(d, prometheus.GaugeValue, v, labels...); err == nil {
			emit(pm)
		}
	}
	gauge(descUp, b2f(s.Varz != nil), name)
	gauge(descHealthz, b2f(s.Healthz == nil || s.Healthz.Status != "ok"), name)
	if s.Varz == nil || s.Varz.JetStream == nil {
		return
	}
	js := s.Varz.JetStream
	gauge(descMaxStorage, float64(js.Config.MaxStore), name)
	gauge(descMaxMemory, float64(js.Config.MaxMemory), name)
	gauge(descStorage, float64(js.Stats.Store), name)
	gauge(descMemory, float64(js.Stats.Memory), name)
	gauge(descResStorage, float64(js.Stats.ReservedStore), name)
	gauge(descResMemory, float64(js.Stats.ReservedMemory), name)
	size, leader := 1, true
	if js.Meta != nil {
		size, leader = js.Meta.Size, js.Meta.Leader != ""
	}
	gauge(descClusterSize, float64(size), name)
	gauge(descMetaLeader, b2f(leader), name)
	if s.Jsz == nil {
		return
	}
	for _, a := range s.Jsz.Accounts {
		for _, st := range a.Streams {
			l := []string{name, a.Name, st.Name}
			gauge(descStreamBytes, float64(st.State.Bytes), l...)
			gauge(descStreamMsgs, float64(st.State.Msgs), l...)
			if c := st.Config; c != nil {
				gauge(descStreamMax, float64(c.MaxBytes), append(l, c.Discard)...)
				gauge(descStreamRepl, float64(c.Replicas), l...)
			}
			hasLeader, current := true, 1
			if g := st.Cluster; g != nil {
				hasLeader, current = g.Leader != "", 0
				if hasLeader {
					current = 1
				}
				for _, p := range g.Replicas {
					if p.Current && !p.Offline {
						current++
					}
				}
			}
			gauge(descStreamLeader, b2f(hasLeader), l...)
			gauge(descStreamCurrent, float64(current), l...)
		}
	}
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
