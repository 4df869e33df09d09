package monitoring

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/cellpay/cellpay/internal/dev/platform"
	"github.com/cellpay/cellpay/internal/dev/testutil"
)

// interval is the test's scrape and rule evaluation interval: short, so
// that an alert's time to fire is its rule's `for` and little else.
const interval = time.Second

// rulesFile is the project's rule file, loaded unchanged.
func rulesFile() string {
	return filepath.Join(env.root, "deploy", "monitoring", "rules", "cellpay.rules.yaml")
}

// prometheus is a Prometheus server of the test's own.
type prometheus struct {
	base string // http://127.0.0.1:port
	cmd  *exec.Cmd
	done chan struct{}
	log  *testutil.Buffer
}

// scrapeJobs is the scrape config for p's processes, with the job names
// the rules expect (deploy/monitoring/README.md): cellpay-gtr with its
// access point in access_point, cellpay-cell, cellpay-issuersim, and
// cellpay-natsmon (NATS's metrics, through natsmon).
func scrapeJobs(p *platform.Platform) []map[string]any {
	targets := map[string][]string{}
	for _, proc := range p.Processes() {
		m := platform.MetricsAddr(proc.Addr)
		switch {
		case proc.Name == platform.GTR:
			targets["cellpay-gtr"] = append(targets["cellpay-gtr"], m)
		case proc.Name == platform.IssuerSim:
			targets["cellpay-issuersim"] = append(targets["cellpay-issuersim"], m)
		case strings.HasPrefix(proc.Name, "cell-"):
			targets["cellpay-cell"] = append(targets["cellpay-cell"], m)
		}
	}
	if m := p.NATSMonAddr(); m != "" {
		targets["cellpay-natsmon"] = []string{m}
	}
	var jobs []map[string]any
	for _, job := range []string{"cellpay-gtr", "cellpay-cell", "cellpay-issuersim", "cellpay-natsmon"} {
		if len(targets[job]) == 0 {
			continue
		}
		sc := map[string]any{"targets": targets[job]}
		if job == "cellpay-gtr" {
			sc["labels"] = map[string]string{"access_point": "primary"}
		}
		jobs = append(jobs, map[string]any{"job_name": job, "static_configs": []any{sc}})
	}
	return jobs
}

// startPrometheus runs /usr/bin/prometheus (PROMETHEUS= elsewhere) on a free
// loopback port with its data in t.TempDir(), scraping p's processes and
// evaluating the project's rules every interval, until the test ends.
func startPrometheus(t *testing.T, p *platform.Platform) *prometheus {
	t.Helper()
	bin := os.Getenv("PROMETHEUS")
	if bin == "" {
		bin = "/usr/bin/prometheus"
	}
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("prometheus: %v (apt-get install prometheus, or set PROMETHEUS)", err)
	}
	dir := t.TempDir()
	cfg := map[string]any{
		"global":         map[string]any{"scrape_interval": interval.String(), "scrape_timeout": interval.String(), "evaluation_interval": interval.String()},
		"rule_files":     []string{rulesFile()},
		"scrape_configs": scrapeJobs(p),
	}
	b, err := yaml.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	cfgFile := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(cfgFile, b, 0o644); err != nil {
		t.Fatal(err)
	}
	ports, err := testutil.FreePortPairs(1, 2000)
	if err != nil {
		t.Fatal(err)
	}
	listen := fmt.Sprintf("127.0.0.1:%d", ports[0])
	pr := &prometheus{base: "http://" + listen, done: make(chan struct{}), log: &testutil.Buffer{}}
	pr.cmd = exec.Command(bin, "--config.file="+cfgFile, "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+listen, "--log.level=warn")
	pr.cmd.Stdout, pr.cmd.Stderr = pr.log, pr.log
	pr.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := pr.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { pr.cmd.Wait(); close(pr.done) }()
	t.Cleanup(func() {
		pr.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-pr.done:
		case <-time.After(10 * time.Second):
			pr.cmd.Process.Kill()
			<-pr.done
		}
		if t.Failed() {
			t.Logf("prometheus log:\n%s", pr.log.String())
		}
	})
	testutil.Eventually(t, 30*time.Second, "prometheus ready", func() bool {
		resp, err := http.Get(pr.base + "/-/ready")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	return pr
}

// get decodes the data of a Prometheus API answer into out.
func (pr *prometheus) get(t *testing.T, path string, q url.Values, out any) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, pr.base+path+"?"+q.Encode(), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("prometheus %s: %v", path, err)
	}
	defer resp.Body.Close()
	var buf bytes.Buffer
	buf.ReadFrom(resp.Body)
	var body struct {
		Status string          `json:"status"`
		Error  string          `json:"error"`
		Data   json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(buf.Bytes(), &body); err != nil || body.Status != "success" {
		t.Fatalf("prometheus %s: %s %v: %s", path, body.Error, err, buf.String())
	}
	if err := json.Unmarshal(body.Data, out); err != nil {
		t.Fatalf("prometheus %s: %v", path, err)
	}
}

// alert is one entry of /api/v1/alerts.
type alert struct {
	Labels   map[string]string `json:"labels"`
	State    string            `json:"state"` // pending or firing
	ActiveAt time.Time         `json:"activeAt"`
}

// alerts returns the active (pending or firing) alerts named name.
func (pr *prometheus) alerts(t *testing.T, name string) []alert {
	t.Helper()
	var data struct {
		Alerts []alert `json:"alerts"`
	}
	pr.get(t, "/api/v1/alerts", nil, &data)
	var out []alert
	for _, a := range data.Alerts {
		if a.Labels["alertname"] == name {
			out = append(out, a)
		}
	}
	return out
}

// query returns the instant vector of expr, by the value of label.
func (pr *prometheus) query(t *testing.T, expr, label string) map[string]string {
	t.Helper()
	var data struct {
		Result []struct {
			Metric map[string]string `json:"metric"`
			Value  [2]any            `json:"value"`
		} `json:"result"`
	}
	pr.get(t, "/api/v1/query", url.Values{"query": {expr}}, &data)
	out := map[string]string{}
	for _, r := range data.Result {
		v, _ := r.Value[1].(string)
		out[r.Metric[label]] = v
	}
	return out
}

// ruleFor returns the `for` of the alert named name in the rule file.
func ruleFor(t *testing.T, name string) time.Duration {
	t.Helper()
	b, err := os.ReadFile(rulesFile())
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Groups []struct {
			Rules []struct {
				Alert string `yaml:"alert"`
				For   string `yaml:"for"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := yaml.Unmarshal(b, &f); err != nil {
		t.Fatal(err)
	}
	for _, g := range f.Groups {
		for _, r := range g.Rules {
			if r.Alert == name {
				d, err := time.ParseDuration(r.For)
				if err != nil {
					t.Fatalf("%s: for %q: %v", name, r.For, err)
				}
				return d
			}
		}
	}
	t.Fatalf("no alert %s in %s", name, rulesFile())
	return 0
}
