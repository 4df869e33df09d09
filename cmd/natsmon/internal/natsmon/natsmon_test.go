package natsmon

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/cellpay/cellpay/internal/dev/testutil"
	"github.com/cellpay/cellpay/internal/dev/testutil/natstest"
)

var update = flag.Bool("update", false, "rewrite testdata/ from a real three-server cluster's answers")

// cluster starts three in-process nats-servers in one JetStream cluster,
// each with its HTTP monitoring on a loopback port, and returns them
// with the Servers natsmon watches.
func cluster(t *testing.T) ([]*natstest.Server, []Server) {
	t.Helper()
	ports := make([]int, 3)
	for i := range ports {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ports[i] = l.Addr().(*net.TCPAddr).Port
		l.Close()
	}
	var routes []string
	for _, p := range ports {
		routes = append(routes, "nats://127.0.0.1:"+strconv.Itoa(p))
	}
	var srvs []*natstest.Server
	var watch []Server
	for i := range 3 {
		s := natstest.StartWith(t, func(o *server.Options) {
			o.ServerName = fmt.Sprintf("n%d", i+1)
			o.HTTPHost, o.HTTPPort = "127.0.0.1", -1
			o.Cluster = server.ClusterOpts{Name: "test", Host: "127.0.0.1", Port: ports[i]}
			o.Routes = server.RoutesFromStr(strings.Join(routes, ","))
		})
		srvs = append(srvs, s)
		watch = append(watch, Server{Name: fmt.Sprintf("n%d", i+1), URL: "http://" + s.NATS().MonitorAddr().String()})
	}
	return srvs, watch
}

// gather collects c's metrics through a pedantic registry (which checks
// them against their descriptions) as "name{l=v,...}" → value.
func gather(t testing.TB, c prometheus.Collector) map[string]float64 {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(c); err != nil {
		t.Fatal(err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		for _, pm := range mf.GetMetric() {
			var l []string
			for _, lp := range pm.GetLabel() {
				l = append(l, lp.GetName()+"="+lp.GetValue())
			}
			sort.Strings(l)
			out[mf.GetName()+"{"+strings.Join(l, ",")+"}"] = pm.GetGauge().GetValue()
		}
	}
	return out
}

// sampleCollector collects one sample's metrics.
type sampleCollector Sample

func (sampleCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range allDescs {
		ch <- d
	}
}

func (s sampleCollector) Collect(ch chan<- prometheus.Metric) {
	Metrics(Sample(s), func(m prometheus.Metric) { ch <- m })
}

// TestCluster: natsmon over a real three-server cluster with a
// replicated key-value bucket of bounded size, as the cells' directory
// is: every server up and healthy, the meta group of three with a
// leader, the bucket's stream with its size, limit, replicas and leader
// on every server; then one server stopped: it reads down, the others
// still report the stream.
func TestCluster(t *testing.T) {
	srvs, watch := cluster(t)
	nc, err := nats.Connect(srvs[0].URL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	const maxBytes = 64 << 10
	var kv jetstream.KeyValue
	testutil.Eventually(t, 20*time.Second, "the bucket created (the cluster has a meta leader)", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		kv, err = js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "txn", Replicas: 3, MaxBytes: maxBytes})
		return err == nil
	})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for i := range 20 {
		if _, err := kv.Put(ctx, fmt.Sprintf("k%d", i), []byte(strings.Repeat("x", 100))); err != nil {
			t.Fatal(err)
		}
	}

	m, err := New(Config{Servers: watch, Interval: time.Second, Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]float64
	ok := testutil.Within(20*time.Second, func() bool {
		m.Poll(context.Background())
		got = gather(t, m)
		// Only the stream's leader knows whether its followers are
		// current: a follower counts the leader and itself.
		current := 0.0
		for _, s := range watch {
			if got[`jetstream_stream_total_messages{account=$G,server=`+s.Name+`,stream=KV_txn}`] != 20 {
				return false
			}
			// A server's storage in /varz is its account's usage, which
			// it updates after the stream's own state in /jsz (CI saw a
			// follower's 2669 bytes under the stream's): wait for it.
			if got["gnatsd_varz_jetstream_stats_storage{server="+s.Name+"}"] < got[`jetstream_stream_total_bytes{account=$G,server=`+s.Name+`,stream=KV_txn}`] {
				return false
			}
			// A server's /healthz says unhealthy while its replica of a new
			// stream catches up (make test saw n2 at 1 once every stream
			// figure was in): wait for every server to say healthy.
			if got["gnatsd_healthz_status{server="+s.Name+"}"] != 0 {
				return false
			}
			current = max(current, got[`natsmon_stream_current_replicas{account=$G,server=`+s.Name+`,stream=KV_txn}`])
		}
		return current == 3
	})
	if !ok {
		t.Fatalf("not within 20 s: every server healthy, reporting the bucket with three current replicas and its bytes in its storage; metrics: %v; samples: %+v", got, m.Samples())
	}
	for _, s := range watch {
		l := "{server=" + s.Name + "}"
		sl := "{account=$G,server=" + s.Name + ",stream=KV_txn}"
		for name, want := range map[string]float64{
			"natsmon_server_up" + l:                       1,
			"gnatsd_healthz_status" + l:                   0,
			"gnatsd_varz_jetstream_meta_cluster_size" + l: 3,
			"natsmon_meta_leader" + l:                     1,
			"natsmon_stream_replicas" + sl:                3,
			"natsmon_stream_leader" + sl:                  1,
			"natsmon_stream_max_bytes{account=$G,discard=new,server=" + s.Name + ",stream=KV_txn}": maxBytes,
		} {
			if v, ok := got[name]; !ok || v != want {
				t.Errorf("%s = %v (present %v), want %v", name, v, ok, want)
			}
		}
		if b := got["jetstream_stream_total_bytes"+sl]; b < 20*100 || b > maxBytes {
			t.Errorf("%s: stream bytes %v, want between the values' 2000 and max_bytes", s.Name, b)
		}
		if st := got["gnatsd_varz_jetstream_stats_storage"+l]; st < got["jetstream_stream_total_bytes"+sl] {
			t.Errorf("%s: storage used %v, less than the stream's bytes", s.Name, st)
		}
		if r := got["gnatsd_varz_jetstream_stats_reserved_storage"+l]; r != maxBytes {
			t.Errorf("%s: reserved storage %v, want the bucket's %d", s.Name, r, maxBytes)
		}
		if got["gnatsd_varz_jetstream_config_max_storage"+l] <= 0 || got["gnatsd_varz_jetstream_config_max_memory"+l] <= 0 {
			t.Errorf("%s: JetStream limits not reported: %v", s.Name, got)
		}
	}
	if *update {
		// The stream leader's answers, which count every replica.
		for _, s := range watch {
			if got[`natsmon_stream_current_replicas{account=$G,server=`+s.Name+`,stream=KV_txn}`] == 3 {
				writeTestdata(t, m, s)
			}
		}
	}

	// One server down: it reads down (and unhealthy) with no JetStream
	// figures; the others keep reporting the bucket.
	srvs[2].Stop()
	down := watch[2].Name
	testutil.Eventually(t, 20*time.Second, "the stopped server read down", func() bool {
		m.Poll(ctx)
		got = gather(t, m)
		return got["natsmon_server_up{server="+down+"}"] == 0
	})
	if got["gnatsd_healthz_status{server="+down+"}"] != 1 {
		t.Errorf("healthz status of the stopped server = %v, want 1", got["gnatsd_healthz_status{server="+down+"}"])
	}
	for k := range got {
		if strings.Contains(k, "server="+down) && !strings.HasPrefix(k, "natsmon_server_up") && !strings.HasPrefix(k, "gnatsd_healthz_status") {
			t.Errorf("%s reported for a server that does not answer", k)
		}
	}
	if _, ok := got["jetstream_stream_total_bytes{account=$G,server="+watch[0].Name+",stream=KV_txn}"]; !ok {
		t.Errorf("the servers still up no longer report the bucket")
	}
}

// writeTestdata keeps one server's real answers as the decoders' and the
// fuzz target's seeds.
func writeTestdata(t *testing.T, m *Monitor, s Server) {
	t.Helper()
	for file, path := range map[string]string{"varz.json": varzPath, "jsz.json": jszPath, "healthz.json": healthzPath} {
		b, err := m.get(context.Background(), s.URL+path, maxJsz, true)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join("testdata", file), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func readTestdata(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestTestdata converts the kept answers of a real cluster member.
func TestTestdata(t *testing.T) {
	v, err := DecodeVarz(readTestdata(t, "varz.json"))
	if err != nil {
		t.Fatal(err)
	}
	j, err := DecodeJsz(readTestdata(t, "jsz.json"))
	if err != nil {
		t.Fatal(err)
	}
	h, err := DecodeHealthz(readTestdata(t, "healthz.json"))
	if err != nil {
		t.Fatal(err)
	}
	got := gather(t, sampleCollector{Server: Server{Name: "n1", URL: "http://x"}, Varz: v, Jsz: j, Healthz: h})
	for name, want := range map[string]float64{
		"natsmon_server_up{server=n1}":                                             1,
		"gnatsd_healthz_status{server=n1}":                                         0,
		"gnatsd_varz_jetstream_meta_cluster_size{server=n1}":                       3,
		"natsmon_meta_leader{server=n1}":                                           1,
		"natsmon_stream_replicas{account=$G,server=n1,stream=KV_txn}":              3,
		"natsmon_stream_leader{account=$G,server=n1,stream=KV_txn}":                1,
		"natsmon_stream_current_replicas{account=$G,server=n1,stream=KV_txn}":      3, // the leader's answer
		"jetstream_stream_total_messages{account=$G,server=n1,stream=KV_txn}":      20,
		"natsmon_stream_max_bytes{account=$G,discard=new,server=n1,stream=KV_txn}": 64 << 10,
		"gnatsd_varz_jetstream_stats_reserved_storage{server=n1}":                  64 << 10,
	} {
		if v, ok := got[name]; !ok || v != want {
			t.Errorf("%s = %v (present %v), want %v", name, v, ok, want)
		}
	}
}

// TestDecodeErrorsNameTheField: an answer that does not hold what natsmon
// reads is an error naming the field.
func TestDecodeErrorsNameTheField(t *testing.T) {
	for _, tc := range []struct {
		decode func([]byte) error
		in     string
		field  string
	}{
		{varz, `{"server_name": 5}`, "server_name"},
		{varz, `{}`, "server_name"},
		{varz, `{"server_name": "` + strings.Repeat("n", 300) + `"}`, "server_name"},
		{varz, `{"server_name": "n1", "jetstream": {"config": {"max_storage": "lots"}, "stats": {}}}`, "jetstream.config.max_storage"},
		{varz, `{"server_name": "n1", "jetstream": {"config": {}}}`, "jetstream.stats"},
		{varz, `{"server_name": "n1", "jetstream": {"config": {}, "stats": {"storage": -1}}}`, "jetstream.stats.storage"},
		{varz, `{"server_name": "n1", "jetstream": {"config": {}, "stats": {}, "meta": {"cluster_size": -3}}}`, "jetstream.meta.cluster_size"},
		{jsz, `{"account_details": [{"name": "$G", "stream_detail": [{"name": "S", "config": {}, "state": {"bytes": "x"}}]}]}`, "account_details.stream_detail.state.bytes"},
		{jsz, `{"account_details": [{"name": "$G", "stream_detail": [{"name": "S"}]}]}`, "account_details[0].stream_detail[0].config"},
		{jsz, `{"account_details": [{"name": "$G", "stream_detail": [{"config": {}}]}]}`, "account_details[0].stream_detail[0].name"},
		{jsz, `{"account_details": [{"stream_detail": []}]}`, "account_details[0].name"},
		{jsz, `{"account_details": [{"name": "$G", "stream_detail": [{"name": "S", "config": {"num_replicas": -1}}]}]}`, "account_details[0].stream_detail[0].config.num_replicas"},
		{jsz, `{"account_details": {}}`, "account_details"},
		{healthz, `{"status": 200}`, "status"},
		{healthz, `{}`, "status"},
	} {
		err := tc.decode([]byte(tc.in))
		var fe *FieldError
		if !errors.As(err, &fe) || fe.Field != tc.field {
			t.Errorf("%s: error %v, want one naming field %s", tc.in, err, tc.field)
		}
	}
	for _, bad := range []string{``, `{`, `[]`, `null x`} {
		if _, err := DecodeJsz([]byte(bad)); err == nil {
			t.Errorf("DecodeJsz(%q): no error", bad)
		}
	}
}

func varz(b []byte) error    { _, err := DecodeVarz(b); return err }
func jsz(b []byte) error     { _, err := DecodeJsz(b); return err }
func healthz(b []byte) error { _, err := DecodeHealthz(b); return err }

// TestBounds: a server slower than the timeout, or answering more than
// the size bound, reads down within the timeout, and a Poll never waits
// longer.
func TestBounds(t *testing.T) {
	release := make(chan struct{})
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer slow.Close()
	defer close(release)
	big := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, `{"server_name": "`+strings.Repeat("x", maxVarz)+`"}`)
	}))
	defer big.Close()
	// Each bound on its own: the slow server against a short timeout, the
	// big answer against a timeout long enough to read past the size
	// bound on a loaded host (under -race, reading the bound's bytes took
	// longer than 200 ms once, and the timeout answered instead).
	slowM, err := New(Config{Servers: []Server{{"slow", slow.URL}}, Interval: time.Second, Timeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	bigM, err := New(Config{Servers: []Server{{"big", big.URL}}, Interval: 30 * time.Second, Timeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	samples := append(slowM.Poll(context.Background()), bigM.Poll(context.Background())...)
	for _, s := range samples {
		if s.Err == nil || s.Varz != nil {
			t.Errorf("%s: sample %+v, want an error and no varz", s.Server.Name, s)
		}
	}
	if !errors.Is(samples[0].Err, context.DeadlineExceeded) && !strings.Contains(samples[0].Err.Error(), "deadline") {
		t.Errorf("slow: %v, want the timeout's error", samples[0].Err)
	}
	if !strings.Contains(samples[1].Err.Error(), "over") {
		t.Errorf("big: %v, want the size bound's error", samples[1].Err)
	}
	if got := gather(t, slowM); got["natsmon_server_up{server=slow}"] != 0 {
		t.Errorf("metrics %v: want slow down", got)
	}
	if got := gather(t, bigM); got["gnatsd_healthz_status{server=big}"] != 1 {
		t.Errorf("metrics %v: want big down", got)
	}
}

func TestConfig(t *testing.T) {
	for _, cfg := range []Config{
		{},
		{Servers: []Server{{"a", "127.0.0.1:8222"}}},
		{Servers: []Server{{"", "http://127.0.0.1:8222"}}},
		{Servers: []Server{{"a", "http://127.0.0.1:8222"}, {"a", "http://127.0.0.1:8223"}}},
		{Servers: []Server{{"a", "http://127.0.0.1:8222"}}, Interval: time.Second, Timeout: 2 * time.Second},
	} {
		if _, err := New(cfg); err == nil {
			t.Errorf("New(%+v): no error", cfg)
		}
	}
}

// FuzzDecode: whatever a server answers, the decoders return an error or
// a value whose metrics can be made, and never panic. Seeded with a real
// cluster member's answers (testdata).
func FuzzDecode(f *testing.F) {
	for _, name := range []string{"varz.json", "jsz.json", "healthz.json"} {
		f.Add(readTestdata(f, name))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		s := Sample{Server: Server{Name: "n1"}}
		s.Varz, _ = DecodeVarz(b)
		s.Jsz, _ = DecodeJsz(b)
		s.Healthz, _ = DecodeHealthz(b)
		if s.Varz == nil {
			// The JetStream part is read only with a varz; take the
			// real one's so that the streams are converted too.
			s.Varz, _ = DecodeVarz(readTestdata(t, "varz.json"))
		}
		// Duplicate streams in crafted input make Gather fail, as
		// they would a scrape (natsmon serves what it can then); the
		// point here is that nothing panics.
		reg := prometheus.NewRegistry()
		if err := reg.Register(sampleCollector(s)); err != nil {
			t.Fatal(err)
		}
		_, _ = reg.Gather()
	})
}
