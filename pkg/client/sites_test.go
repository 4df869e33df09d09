package client

import (
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/cellpay/cellpay/pkg/api/cellpayv1"
	"github.com/cellpay/cellpay/pkg/client/failover"
	"github.com/cellpay/cellpay/pkg/routing"
)

// dialSites dials aps for a partner homed in home, with the test's
// back-off and probe timeout.
func dialSites(t *testing.T, aps []AccessPoint, home string, cfg Config) *Client {
	t.Helper()
	cfg.HomeSite = home
	cfg.Backoff, cfg.MaxBackoff = time.Millisecond, time.Millisecond
	if cfg.ProbeTimeout == 0 {
		cfg.ProbeTimeout = 100 * time.Millisecond
	}
	c, err := DialAccessPoints(aps, cfg, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// TestStartsAtHomeAndRetriesThere: the first listed access point of the
// home site takes the calls, wherever it is listed; a call that fails
// there is retried on another of the home site, not on the other site's
// listed before it.
func TestStartsAtHomeAndRetriesThere(t *testing.T) {
	b1, a1, a2 := serveAccessPoint(t, always(nil)), serveAccessPoint(t, always(status.Error(codes.Unavailable, "down"))), serveAccessPoint(t, always(nil))
	c := dialSites(t, []AccessPoint{{b1.addr, "site-b"}, {a1.addr, "site-a"}, {a2.addr, "site-a"}}, "site-a", Config{Failover: failover.Config{SplitRatio: 100}})
	if st := c.FailoverStats(); st.Current != a1.addr || st.CurrentSite != "site-a" {
		t.Fatalf("starts on %s (%s), want %s in site-a", st.Current, st.CurrentSite, a1.addr)
	}
	_, info, err := c.SubmitWithInfo(ctxT(t), req())
	if err != nil || info.Endpoint != a2.addr || !info.FailedOver || info.Attempts != 2 {
		t.Fatalf("info %+v, err %v: want the retry on %s, site-a's other", info, err, a2.addr)
	}
	if a1.calls() != 1 || a2.calls() != 1 || b1.calls() != 0 {
		t.Fatalf("calls: site-b %d, site-a %d and %d", b1.calls(), a1.calls(), a2.calls())
	}
}

// restartable is a fake GTR at a fixed loopback address that a test can
// stop (as a site is lost) and start again.
type restartable struct {
	*accessPoint
	srv *grpc.Server
}

func serveRestartable(t *testing.T) *restartable {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &restartable{accessPoint: &accessPoint{
		fakeGTR: &fakeGTR{submit: always(nil), get: func(int) (*cellpayv1.Transaction, error) { return approved(), nil }},
		addr:    lis.Addr().String(), health: health.NewServer(),
	}}
	r.serve(t, lis)
	return r
}

// stop stops the server: its listener and connections close.
func (r *restartable) stop() {
	if r.srv != nil {
		r.srv.Stop()
	}
}

// start serves the same fake GTR and health service at the same address
// again.
func (r *restartable) start(t *testing.T) {
	t.Helper()
	var lis net.Listener
	var err error
	for range 50 { // the port was ours a moment ago
		if lis, err = net.Listen("tcp", r.addr); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		t.Fatal(err)
	}
	r.serve(t, lis)
}

// serve serves r on lis until stop or the test's end.
func (r *restartable) serve(t *testing.T, lis net.Listener) {
	s := grpc.NewServer()
	cellpayv1.RegisterPaymentsServer(s, r.fakeGTR)
	healthpb.RegisterHealthServer(s, r.health)
	go s.Serve(lis)
	r.srv = s
	t.Cleanup(s.Stop)
}

// TestRidesThroughTheLossOfTheHomeSite: over real gRPC, three access
// points in two sites. Stopping the home site's two moves the calls to the
// other site's without a failed Submit (each one that meets a stopped
// access point is resent, identical, under the same transaction ID), and
// starting them again brings the calls home.
func TestRidesThroughTheLossOfTheHomeSite(t *testing.T) {
	a1, a2, b1 := serveRestartable(t), serveRestartable(t), serveRestartable(t)
	// A patient partner: a Submit's back-off retries go where the rules
	// say, which is the failing access point until a rule has moved the
	// client; 50 attempts up to 50ms apart outlast a probe round on a
	// loaded host.
	c := dialSites(t, []AccessPoint{{a1.addr, "site-a"}, {a2.addr, "site-a"}, {b1.addr, "site-b"}}, "site-a", Config{
		MaxAttempts: 50, CallTimeout: time.Second,
		Failover: failover.Config{ProbeInterval: 50 * time.Millisecond, EvalInterval: 50 * time.Millisecond, SplitRatio: 100, MaxSwitches: 20},
	})
	c.cfg.Backoff, c.cfg.MaxBackoff = 5*time.Millisecond, 50*time.Millisecond
	submits := 0
	// submitUntil submits until n calls in a row were answered at want,
	// within 10 s, failing the test at the first failed Submit.
	submitUntil := func(what string, want string, n int) {
		t.Helper()
		deadline, run := time.Now().Add(10*time.Second), 0
		for run < n {
			if time.Now().After(deadline) {
				t.Fatalf("not within 10s: %s (stats %+v, events %+v)", what, c.FailoverStats(), c.Events())
			}
			_, info, err := c.SubmitWithInfo(ctxT(t), req())
			submits++
			if err != nil {
				t.Fatalf("%s: Submit %d failed: %v (info %+v, stats %+v)", what, submits, err, info, c.FailoverStats())
			}
			if info.Endpoint == want && !info.FailedOver {
				run++
			} else {
				run = 0
			}
			time.Sleep(time.Millisecond) // a partner's pace, not a busy loop
		}
	}
	submitUntil("calls at home", a1.addr, 5)

	a1.stop()
	a2.stop()
	submitUntil("calls at the other site", b1.addr, 20)
	if st := c.FailoverStats(); st.Current != b1.addr || st.CurrentSite != "site-b" {
		t.Fatalf("stats %+v: want on %s in site-b", st, b1.addr)
	}
	crossed := false
	for _, e := range c.Events() {
		crossed = crossed || e.FromSite == "site-a" && e.To == b1.addr && e.ToSite == "site-b" && e.Rule != "" && e.Reason != ""
	}
	if !crossed {
		t.Fatalf("no event of the crossing: %+v", c.Events())
	}
	b1.mu.Lock()
	for _, r := range b1.submits {
		if !proto.Equal(r, req()) {
			t.Fatal("a resend changed the request")
		}
	}
	b1.mu.Unlock()

	a1.start(t)
	a2.start(t)
	before := b1.calls()
	submitUntil("calls back home", a1.addr, 5)
	ev := c.Events()
	last := ev[len(ev)-1]
	if last.To != a1.addr || last.ToSite != "site-a" || last.FromSite != "site-b" || last.Rule != string(failover.RuleProbe) {
		t.Fatalf("last event %+v: want the probes' return to %s", last, a1.addr)
	}
	if st := c.FailoverStats(); st.Current != a1.addr || st.CurrentSite != "site-a" || st.Answered[b1.addr] < 20 || st.Failed[b1.addr] != 0 {
		t.Fatalf("stats %+v", st)
	}
	t.Logf("%d submits, none failed; %d answered in site-b; events %+v", submits, before, ev)
}

// TestComesHomeToAnyAccessPointOfItsSite: over real gRPC, a client that
// crossed because both access points of its home site stopped comes home
// to the one that starts again, while the preferred one stays down: the
// probe rounds ask every access point of the home site while across.
func TestComesHomeToAnyAccessPointOfItsSite(t *testing.T) {
	a1, a2, b1 := serveRestartable(t), serveRestartable(t), serveRestartable(t)
	c := dialSites(t, []AccessPoint{{a1.addr, "site-a"}, {a2.addr, "site-a"}, {b1.addr, "site-b"}}, "site-a", Config{
		MaxAttempts: 50, CallTimeout: time.Second,
		Failover: failover.Config{ProbeInterval: 50 * time.Millisecond, EvalInterval: time.Hour, SplitRatio: 100, MaxSwitches: 20},
	})
	c.cfg.Backoff, c.cfg.MaxBackoff = 5*time.Millisecond, 50*time.Millisecond
	// on waits, within 10 s, until the client is on want, submitting at a
	// partner's pace; every Submit must succeed.
	on := func(what, want string) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); c.FailoverStats().Current != want; time.Sleep(2 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("not within 10s: %s (stats %+v, events %+v)", what, c.FailoverStats(), c.Events())
			}
			if _, info, err := c.SubmitWithInfo(ctxT(t), req()); err != nil {
				t.Fatalf("%s: Submit failed: %v (info %+v)", what, err, info)
			}
		}
	}
	if _, err := c.Submit(ctxT(t), req()); err != nil {
		t.Fatal(err)
	}
	a1.stop()
	a2.stop()
	on("across, on site-b", b1.addr)
	a2.start(t)
	on("home again, on site-a's second", a2.addr)
	ev := c.Events()
	last := ev[len(ev)-1]
	if last.From != b1.addr || last.To != a2.addr || last.ToSite != "site-a" || last.Rule != string(failover.RuleProbe) {
		t.Fatalf("last event %+v: want the probes' return to %s", last, a2.addr)
	}
	if _, info, err := c.SubmitWithInfo(ctxT(t), req()); err != nil || info.Endpoint != a2.addr {
		t.Fatalf("after the return: info %+v, err %v", info, err)
	}
	if st := c.FailoverStats(); st.AnswerTime[a2.addr] <= 0 || st.AnswerTime[b1.addr] <= 0 || st.AnswerTime[a1.addr] <= 0 {
		t.Fatalf("answer times %v: want one for each access point that answered", st.AnswerTime)
	}
}

// TestDialAccessPointsRefuses: the limits of a list of access points and
// of the home site, each refusal naming its field.
func TestDialAccessPointsRefuses(t *testing.T) {
	opt := grpc.WithTransportCredentials(insecure.NewCredentials())
	sited := func(sites ...string) []AccessPoint {
		aps := make([]AccessPoint, len(sites))
		for i, s := range sites {
			aps[i] = AccessPoint{Addr: "127.0.0.1:" + string(rune('1'+i)), Site: s}
		}
		return aps
	}
	six := sited("a", "a", "a", "b", "b", "b")
	c, err := DialAccessPoints(six, Config{HomeSite: "b"}, opt)
	if err != nil {
		t.Fatalf("six access points: %v", err)
	}
	if st := c.FailoverStats(); st.Current != six[3].Addr || st.CurrentSite != "b" {
		t.Errorf("six access points, home b: on %s (%s), want %s", st.Current, st.CurrentSite, six[3].Addr)
	}
	c.Close()
	for _, tt := range []struct {
		name string
		aps  []AccessPoint
		home string
		want string
	}{
		{"seven", sited("a", "a", "a", "b", "b", "b", "b"), "a", "7 access points: at most 6"},
		{"none", nil, "", "no access point"},
		{"an address twice", []AccessPoint{{"127.0.0.1:1", "a"}, {"127.0.0.1:2", "a"}, {"127.0.0.1:1", "b"}}, "a", `AccessPoint[2].Addr "127.0.0.1:1": AccessPoint[0]'s too`},
		{"no address", []AccessPoint{{"127.0.0.1:1", "a"}, {"", "b"}}, "a", "AccessPoint[1].Addr is empty"},
		{"a site's form", sited("a", "Site-B"), "a", `AccessPoint[1].Site: site "Site-B": want lowercase letters`},
		{"a site too long", sited("a", strings.Repeat("b", 33)), "a", "AccessPoint[1].Site: site of 33 bytes"},
		{"some sites", sited("a", "b", ""), "a", "AccessPoint[2].Site is empty: give every access point its site, or none"},
		{"no home", sited("a", "b"), "", "Config.HomeSite is empty"},
		{"home elsewhere", sited("a", "b"), "c", `Config.HomeSite "c": no access point is in it`},
		{"home without sites", sited("", ""), "a", `Config.HomeSite "a": no access point has a site`},
		{"three without sites", sited("", "", ""), "", "3 access points without sites: want a primary and at most one backup"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c, err := DialAccessPoints(tt.aps, Config{HomeSite: tt.home}, opt)
			if err == nil {
				c.Close()
			}
			if !errors.Is(err, ErrInvalidAccessPoints) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("DialAccessPoints = %v, want ErrInvalidAccessPoints saying %q", err, tt.want)
			}
		})
	}
	if _, err := DialEndpoints([]string{"127.0.0.1:1", "127.0.0.1:1"}, Config{}, opt); !errors.Is(err, ErrInvalidAccessPoints) {
		t.Errorf("DialEndpoints with an address twice: %v", err)
	}
}

// TestCheckSiteIsRoutings: the client's copy of the site rule (it may not
// import pkg/routing) answers as routing.CheckSite does.
func TestCheckSiteIsRoutings(t *testing.T) {
	for _, s := range []string{"", "a", "site-a", "b2", "a-b-c", strings.Repeat("a", 32), strings.Repeat("a", 33),
		"A", "site-", "-a", "1a", "a_b", "a b", "a.b", "é", "a\x00", "ab-"} {
		got, want := checkSite(s), routing.CheckSite(s)
		if (got == nil) != (want == nil) || got != nil && got.Error() != want.Error() {
			t.Errorf("%q: checkSite %v, routing.CheckSite %v", s, got, want)
		}
	}
}
