package health

import (
	"context"
	"errors"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/cellpay/cellpay/internal/grpclimits"
	"github.com/cellpay/cellpay/internal/hop"
	"github.com/cellpay/cellpay/pkg/routing"
)

// A cell is as healthy as its healthiest instance: the monitor probes each
// instance on its own connection (so that one dead instance among live
// ones is seen, and shown, for what it is), and a round counts the cell
// SERVING while any instance is. Outlier detection and ejection stay per
// cell: requests are balanced over a cell's healthy instances by its
// connection (package cellconn), and what the payments path observes is
// the cell's.

// instance is one instance of a cell and its latest probe.
type instance struct {
	addr  string
	conn  *grpc.ClientConn
	check healthpb.HealthClient
	last  atomic.Pointer[probe]
}

// probe is what one health check of an instance found.
type probe struct {
	res    checkResult
	detail string
	at     time.Time
}

// InstanceState is an instance's health by its latest check.
type InstanceState uint8

// The instance states.
const (
	InstanceUnknown InstanceState = iota // not checked yet
	InstanceUp                           // answered SERVING
	InstanceDown                         // answered otherwise, late, or not at all
)

// InstanceHealth is one instance of a cell as the monitor last saw it.
type InstanceHealth struct {
	Addr      string
	State     InstanceState
	Detail    string // why it is down: "NOT_SERVING", "timeout", a gRPC code
	CheckedAt time.Time
}

// Instances returns the instances of a cell in list order (sorted by
// address for a dns:/// name), each with its latest check; nil for a cell
// it does not know. A dns:/// cell whose name did not resolve lists none.
func (m *Monitor) Instances(cellID string) []InstanceHealth {
	s := m.cell(cellID)
	if s == nil {
		return nil
	}
	insts := *s.insts.Load()
	out := make([]InstanceHealth, len(insts))
	for i, in := range insts {
		out[i] = InstanceHealth{Addr: in.addr}
		if p := in.last.Load(); p != nil {
			out[i].State, out[i].Detail, out[i].CheckedAt = InstanceDown, p.detail, p.at
			if p.res == checkServing {
				out[i].State = InstanceUp
			}
		}
	}
	return out
}

func isDNS(addr string) bool { return strings.HasPrefix(addr, "dns:///") }

// instanceAddrs are the addresses of a cell that lists them (Addrs, or
// Addr alone).
func instanceAddrs(c Cell) []string {
	if len(c.Addrs) > 0 {
		return c.Addrs
	}
	return []string{c.Addr}
}

// dialAll connects to each address (lazily: grpc.NewClient does no I/O).
// authority, when not empty, is the name each is authenticated under (a
// pod's IP found through a DNS name serves the name's certificate).
func (m *Monitor) dialAll(cellID string, addrs []string, authority string) []*instance {
	dial := grpc.WithTransportCredentials(insecure.NewCredentials())
	if m.cfg.Dial != nil {
		dial = m.cfg.Dial(cellID)
	}
	opts := append([]grpc.DialOption{dial, hop.ReconnectWithin(m.cfg.Interval)}, grpclimits.Internal.DialOptions()...)
	opts = append(opts, m.cfg.DialOptions...)
	if authority != "" {
		opts = append(opts, grpc.WithAuthority(authority))
	}
	out := make([]*instance, 0, len(addrs))
	for _, a := range addrs {
		target := a
		if authority != "" {
			target = "passthrough:///" + a
		}
		conn, err := grpc.NewClient(target, opts...)
		if err != nil {
			m.cfg.Log.Error("health: cannot watch instance", "cell", cellID, "addr", a, "error", err)
			continue
		}
		out = append(out, &instance{addr: a, conn: conn, check: healthpb.NewHealthClient(conn)})
	}
	return out
}

func (s *cellState) setInstances(insts []*instance) { s.insts.Store(&insts) }

// closeInstances closes the cell's connections, for good.
func (s *cellState) closeInstances() {
	s.imu.Lock()
	defer s.imu.Unlock()
	s.gone = true
	for _, in := range *s.insts.Load() {
		in.conn.Close()
	}
}

// resolve refreshes a dns:/// cell's instances from its name, within
// CheckTimeout and at most every ResolveInterval, keeping the connections
// of addresses it still has. A name that does not exist (no ready pod
// behind a headless Service) leaves the cell no instance; a lookup that
// fails otherwise (a timeout, a DNS server away) keeps the instances it
// had, so that a flaky resolver does not take a serving cell down. It
// returns the lookup's error.
func (m *Monitor) resolve(ctx context.Context, s *cellState) error {
	s.imu.Lock()
	fresh := !s.resolvedAt.IsZero() && time.Since(s.resolvedAt) < m.cfg.ResolveInterval
	s.imu.Unlock()
	if fresh {
		return nil
	}
	hostport := strings.TrimPrefix(s.Addr, "dns:///")
	host, port, err := net.SplitHostPort(hostport)
	if err != nil {
		return err
	}
	lctx, cancel := context.WithTimeout(ctx, m.cfg.CheckTimeout)
	defer cancel()
	ips, err := net.DefaultResolver.LookupHost(lctx, host)
	var dnsErr *net.DNSError
	if err != nil && !(errors.As(err, &dnsErr) && dnsErr.IsNotFound) {
		return err
	}
	addrs := make([]string, 0, len(ips))
	for _, ip := range ips {
		addrs = append(addrs, net.JoinHostPort(ip, port))
	}
	slices.Sort(addrs)
	addrs = slices.Compact(addrs)
	addrs = addrs[:min(len(addrs), routing.MaxInstances)] // a bounded view of a large Service
	s.imu.Lock()
	defer s.imu.Unlock()
	if s.gone {
		return err
	}
	s.resolvedAt = time.Now()
	cur := *s.insts.Load()
	if slices.EqualFunc(cur, addrs, func(in *instance, a string) bool { return in.addr == a }) {
		return err
	}
	var next []*instance
	var added []string
	for _, a := range addrs {
		if i := slices.IndexFunc(cur, func(in *instance) bool { return in.addr == a }); i >= 0 {
			next = append(next, cur[i])
		} else {
			added = append(added, a)
		}
	}
	next = append(next, m.dialAll(s.ID, added, hostport)...)
	slices.SortFunc(next, func(a, b *instance) int { return strings.Compare(a.addr, b.addr) })
	for _, in := range cur {
		if !slices.Contains(next, in) {
			in.conn.Close()
		}
	}
	s.setInstances(next)
	return err
}

// checkCell probes every instance of s at once, each within CheckTimeout,
// and says what the round found for the cell: SERVING if any instance
// is; else slow if any answered late; else down.
func (m *Monitor) checkCell(ctx context.Context, s *cellState) checkResult {
	if isDNS(s.Addr) {
		if err := m.resolve(ctx, s); err != nil {
			m.cfg.Log.Debug("health: cell name did not resolve", "cell", s.ID, "addr", s.Addr, "error", err)
		}
	}
	insts := *s.insts.Load()
	results := make([]checkResult, len(insts))
	var wg sync.WaitGroup
	for i, in := range insts {
		wg.Go(func() { results[i] = m.probe(ctx, in) })
	}
	wg.Wait()
	cell := checkDown
	for _, r := range results {
		if r < cell { // checkServing < checkSlow < checkDown
			cell = r
		}
	}
	return cell
}

// probe checks one instance and records what it found.
func (m *Monitor) probe(ctx context.Context, in *instance) checkResult {
	cctx, cancel := context.WithTimeout(ctx, m.cfg.CheckTimeout)
	defer cancel()
	resp, err := in.check.Check(cctx, &healthpb.HealthCheckRequest{})
	p := &probe{res: checkDown, at: m.cfg.Now()}
	switch {
	case err == nil && resp.GetStatus() == healthpb.HealthCheckResponse_SERVING:
		p.res = checkServing
	case err == nil:
		p.detail = resp.GetStatus().String()
	case status.Code(err) == codes.DeadlineExceeded:
		p.res, p.detail = checkSlow, "timeout"
	default:
		p.detail = status.Code(err).String()
	}
	if ctx.Err() == nil {
		in.last.Store(p)
	}
	return p.res
}
