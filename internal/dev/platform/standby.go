package platform

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cellpay/cellpay/internal/dev/pgcluster"
)

// A cell's database is a pair of servers: a primary and a streaming
// standby that the primary requires for every commit
// (synchronous_standby_names names it, synchronous_commit is on), so an
// answer a partner received is on two servers. Each server is a node with
// a fixed data dir and port:
//
//	node 0  DataDir/pg/<cell>          PGBasePort+i       (7431, 7432, 7433)
//	node 1  DataDir/pg/<cell>-standby  StandbyBasePort+i  (7441, 7442, 7443)
//
// Node 0 starts as the primary. The launcher's watchdog promotes the
// standby when the primary crashes or stops answering, so after a
// failover the primary is node 1 until the next one: the cells connect
// to both nodes with target_session_attrs=read-write and find it.
//
// Failover follows Patroni's non-strict synchronous mode
// (synchronous_mode without synchronous_mode_strict): the promoted node
// has no standby, and rather than stop every commit until it has one it
// clears synchronous_standby_names, DEGRADED, logged loudly, until a new
// standby streams; then it requires it again. During that window a
// commit is on one server only.
//
// Fencing: the old primary is killed if it still runs, marked fenced
// (pgcluster.Fence: it never starts again, from this process or the next
// launcher), and its data dir, if it is still there, is moved aside to
// pg/<cell>....fenced-<time> for inspection. Its node is rebuilt as the
// new standby from a fresh base backup of the new primary, never by
// starting the old data (no pg_rewind: a base backup of a cell's
// database takes a second or two here, and cannot get the divergence
// wrong).
//
// A planned stop (Postgres(cell).Stop) is maintenance, not a failure: the
// watchdog does not fail it over, and Restart brings the primary back.

// Replication names of a cell's database pair.
const (
	// ReplicationRole is the role standbys stream as (REPLICATION LOGIN,
	// nothing else), its password in pgroles/<cell>/cellpay_replicator.password.
	ReplicationRole = "cellpay_replicator"
	// standbyName is the application_name of a cell's standby, whichever
	// node it is, and the name of its slot on the primary.
	standbyName = "cellpay_standby"
)

// Watchdog defaults.
const (
	DefaultStandbyBasePort       = 7441
	DefaultFailoverCheckInterval = 500 * time.Millisecond
	DefaultFailoverChecks        = 3
)

// checkTimeout bounds one check of a primary. It is longer than the
// interval on purpose: on a loaded machine a healthy server can take
// more than 500 ms to answer, and a failover of a healthy primary,
// though it loses nothing, costs the cell seconds.
const checkTimeout = time.Second

// pgSettings are the settings of both nodes: the standby retries a lost
// primary every half second (default 5 s) so that a restarted primary
// has its synchronous standby back quickly, and a slot whose standby is
// gone keeps at most 1 GB of WAL (default: without bound).
var pgSettings = map[string]string{
	"wal_retrieve_retry_interval": "500ms",
	"max_slot_wal_keep_size":      "1GB",
}

// Failover records one promotion by the watchdog.
type Failover struct {
	Cell string
	// Reason says why the primary was taken for lost.
	Reason string
	// Detected is when the watchdog took the primary for lost;
	// Promoted, when the standby took writes.
	Detected, Promoted time.Time
	// OldPrimary and NewPrimary are the nodes' addresses.
	OldPrimary, NewPrimary string
	// Restored is when a new standby was synchronous again (zero until
	// then): the end of the degraded window.
	Restored time.Time
}

// Took is the time from detection to promotion.
func (f Failover) Took() time.Duration { return f.Promoted.Sub(f.Detected) }

// pgNode is one of a pair's servers: where it lives.
type pgNode struct {
	dataDir string
	port    int
	log     *os.File
}

func (n pgNode) addr() string { return "127.0.0.1:" + strconv.Itoa(n.port) }

// pgPair is a cell's database pair. mu guards the fields below it; the
// watchdog of the cell is the only writer after Start.
type pgPair struct {
	cell  string
	nodes [2]pgNode
	cfg   func(node int) pgcluster.Config // the node's config, as a primary
	repl  pgcluster.Replication
	ca    string

	mu        sync.Mutex
	primary   int                   // index into nodes and srv
	srv       [2]*pgcluster.Cluster // nil: not running (standby missing)
	degraded  bool                  // the primary requires no standby
	failovers []Failover
}

func (pp *pgPair) current() (primary, standby *pgcluster.Cluster) {
	pp.mu.Lock()
	defer pp.mu.Unlock()
	return pp.srv[pp.primary], pp.srv[1-pp.primary]
}

func (pp *pgPair) primaryAddr() string {
	pp.mu.Lock()
	defer pp.mu.Unlock()
	return pp.nodes[pp.primary].addr()
}

// standbyConfig is node's config as a standby of the pair's primary.
func (pp *pgPair) standbyConfig(node int) pgcluster.Config {
	cfg := pp.cfg(node)
	cfg.Standby = &pgcluster.Standby{
		PrimaryPort: pp.nodes[1-node].port, User: pp.repl.User, Password: pp.repl.Password,
		CAFile: pp.ca, Slot: standbyName, Name: standbyName,
	}
	return cfg
}

// pickPrimary decides, from what the data dirs hold, which node is the
// primary: the one that holds a primary that is not fenced, node 0 when
// neither does (a new pair). Two primaries cannot be told apart safely.
func pickPrimary(nodes [2]pgNode) (int, error) {
	isPrimary := func(n pgNode) bool {
		_, err := os.Stat(filepath.Join(n.dataDir, "PG_VERSION"))
		return err == nil && !pgcluster.IsStandby(n.dataDir) && !pgcluster.IsFenced(n.dataDir)
	}
	p0, p1 := isPrimary(nodes[0]), isPrimary(nodes[1])
	switch {
	case p0 && p1:
		return 0, fmt.Errorf("both %s and %s hold a primary: move the one that must not serve away", nodes[0].dataDir, nodes[1].dataDir)
	case p1:
		return 1, nil
	default:
		return 0, nil
	}
}

// moveAside renames a data dir that must never serve again (fenced, or a
// standby of another history) out of the node's way.
func moveAside(dataDir string) (string, error) {
	if _, err := os.Stat(dataDir); errors.Is(err, os.ErrNotExist) {
		return "", nil
	}
	to := dataDir + ".fenced-" + time.Now().UTC().Format("20060102T150405.000")
	return to, os.Rename(dataDir, to)
}

// startStandby starts node as a standby of the primary (a fresh base
// backup unless its data dir holds a standby already; a fenced dir or a
// primary's is moved aside first), waits until it streams and requires
// it synchronously.
func (pp *pgPair) startStandby(ctx context.Context, node int, primary *pgcluster.Cluster, fresh bool) (*pgcluster.Cluster, error) {
	dir := pp.nodes[node].dataDir
	if fresh || pgcluster.IsFenced(dir) || !pgcluster.IsStandby(dir) {
		if _, err := moveAside(dir); err != nil {
			return nil, err
		}
	}
	if err := pgcluster.EnsureReplication(ctx, primary.URL("postgres"), pp.repl, standbyName); err != nil {
		return nil, err
	}
	sb, err := pgcluster.Start(ctx, pp.standbyConfig(node))
	if err != nil {
		return nil, err
	}
	if _, err := primary.WaitStreaming(ctx, standbyName); err != nil {
		_ = sb.Stop()
		return nil, err
	}
	if err := primary.SetSynchronousStandby(ctx, standbyName); err != nil {
		_ = sb.Stop()
		return nil, err
	}
	if err := primary.WaitSynchronous(ctx, standbyName); err != nil {
		_ = sb.Stop()
		return nil, err
	}
	return sb, nil
}

// watch is the cell's failover watchdog, until ctx ends: every interval
// it checks the primary, and fails over after checks failed checks in a
// row, or at once when the primary's process exited unasked; while
// degraded it rebuilds a standby (retrying every few seconds).
func (p *Platform) watch(ctx context.Context, pp *pgPair) {
	interval, limit := p.cfg.FailoverCheckInterval, p.cfg.FailoverChecks
	t := time.NewTicker(interval)
	defer t.Stop()
	failed := 0
	var nextRebuild time.Time
	var handledExit <-chan struct{} // the exit already acted on
	warned := false                 // "no standby to promote" said once
	for {
		prim, _ := pp.current()
		exited := prim.Exited()
		if exited == handledExit {
			exited = nil // acted on: wait for the ticker
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-exited: // a crash is seen at once, not at the next tick
			handledExit = exited
		}
		reason := check(ctx, prim, &failed, limit, interval)
		if _, sb := pp.current(); reason != "" && (sb == nil || !sb.Running()) {
			if !warned {
				p.logf("%s: primary %s lost (%s), and there is NO STANDBY to promote: the cell is down until its primary returns",
					pp.cell, pp.primaryAddr(), reason)
				warned = true
			}
			continue
		}
		warned = false
		if reason != "" {
			failed = 0
			p.failover(ctx, pp, reason)
			nextRebuild = time.Time{}
		} else if _, sb := pp.current(); sb != nil && sb.Crashed() {
			p.standbyLost(ctx, pp, prim)
		}
		pp.mu.Lock()
		degraded := pp.degraded
		pp.mu.Unlock()
		if prim, _ := pp.current(); degraded && prim.Running() && time.Now().After(nextRebuild) && ctx.Err() == nil {
			if err := p.rebuild(ctx, pp); err != nil && ctx.Err() == nil {
				p.logf("%s: rebuilding a standby failed, retrying in 5 s: %v", pp.cell, err)
				nextRebuild = time.Now().Add(5 * time.Second)
			}
		}
	}
}

// startWatchdogs starts a watchdog per cell with a standby.
func (p *Platform) startWatchdogs() {
	if p.cfg.NoStandby || len(p.pairs) == 0 {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for _, pp := range p.pairs {
		wg.Go(func() { p.watch(ctx, pp) })
	}
	p.stopWatch = func() { cancel(); wg.Wait() }
}

// DescribeDatabases says where each cell's private primary and standby
// are now, for people: "cell-a primary 127.0.0.1:7431, synchronous
// standby 127.0.0.1:7441; ...".
func (p *Platform) DescribeDatabases() string {
	var s []string
	for _, c := range p.cfg.Cells {
		pp := p.pairs[c.ID]
		if pp == nil {
			continue
		}
		pp.mu.Lock()
		d := c.ID + " primary " + pp.nodes[pp.primary].addr()
		if pp.srv[1-pp.primary] != nil {
			d += ", synchronous standby " + pp.nodes[1-pp.primary].addr()
		}
		pp.mu.Unlock()
		s = append(s, d)
	}
	return strings.Join(s, "; ")
}

// check checks the primary once and returns why it is lost, or "":
// its process exited unasked, or this is the limit-th failed check in a
// row (failed counts them). A planned stop is neither.
func check(ctx context.Context, prim *pgcluster.Cluster, failed *int, limit int, interval time.Duration) string {
	switch {
	case prim.Crashed():
		return "its postgres exited"
	case !prim.Running():
		return ""
	}
	cctx, cancel := context.WithTimeout(ctx, checkTimeout)
	err := ping(cctx, prim)
	cancel()
	if err == nil || ctx.Err() != nil {
		*failed = 0
		return ""
	}
	if *failed++; *failed < limit {
		return ""
	}
	return fmt.Sprintf("%d checks failed, %d ms apart (last: %v)", *failed, interval.Milliseconds(), err)
}

func ping(ctx context.Context, c *pgcluster.Cluster) error {
	_, err := c.InRecovery(ctx)
	return err
}

// failover fences the primary and promotes the standby.
func (p *Platform) failover(ctx context.Context, pp *pgPair, reason string) {
	detected := time.Now()
	pp.mu.Lock()
	oldNode := pp.primary
	old, sb := pp.srv[oldNode], pp.srv[1-oldNode]
	pp.mu.Unlock()
	if err := old.Fence(); err != nil {
		// Promoting beside a primary that may still take writes would
		// split the cell's history: better down than two primaries.
		p.logf("%s: primary %s lost (%s), but fencing it failed, so the standby is NOT promoted: %v", pp.cell, pp.nodes[oldNode].addr(), reason, err)
		return
	}
	pctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	err := sb.Promote(pctx)
	cancel()
	if err != nil {
		p.logf("%s: promoting the standby %s FAILED: %v", pp.cell, pp.nodes[1-oldNode].addr(), err)
		return
	}
	f := Failover{Cell: pp.cell, Reason: reason, Detected: detected, Promoted: time.Now(),
		OldPrimary: pp.nodes[oldNode].addr(), NewPrimary: pp.nodes[1-oldNode].addr()}
	pp.mu.Lock()
	pp.primary = 1 - oldNode
	pp.srv[oldNode] = nil
	pp.degraded = true
	pp.failovers = append(pp.failovers, f)
	pp.mu.Unlock()
	p.logf("FAILOVER %s: primary %s lost (%s); standby %s promoted in %d ms after detection, the old primary fenced. "+
		"Synchronous replication DEGRADED (synchronous_standby_names=''): commits are on one server until a new standby streams",
		pp.cell, f.OldPrimary, reason, f.NewPrimary, f.Took().Milliseconds())
	_ = p.writeRunInfo()
}

// standbyLost stops requiring a standby that crashed, as Patroni's
// non-strict synchronous mode does: otherwise every commit would wait for
// it until its statement_timeout, and then be acknowledged anyway
// (Postgres ends a cancelled wait for a synchronous standby with a
// WARNING, the transaction committed locally). The standby is started
// again by rebuild, on its own data dir.
func (p *Platform) standbyLost(ctx context.Context, pp *pgPair, prim *pgcluster.Cluster) {
	pp.mu.Lock()
	node := 1 - pp.primary
	pp.srv[node] = nil
	pp.degraded = true
	pp.mu.Unlock()
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	err := prim.SetSynchronousStandby(sctx, "")
	cancel()
	p.logf("%s: standby %s lost (its postgres exited). Synchronous replication DEGRADED (synchronous_standby_names=''): commits are on one server until it streams again (%v)",
		pp.cell, pp.nodes[node].addr(), err)
	_ = p.writeRunInfo()
}

// rebuild makes the node that is not the primary a new standby.
func (p *Platform) rebuild(ctx context.Context, pp *pgPair) error {
	pp.mu.Lock()
	node := 1 - pp.primary
	prim := pp.srv[pp.primary]
	pp.mu.Unlock()
	start := time.Now()
	dir := pp.nodes[node].dataDir
	if pgcluster.IsFenced(dir) || !pgcluster.IsStandby(dir) {
		if to, err := moveAside(dir); err != nil {
			return err
		} else if to != "" {
			p.logf("%s: the fenced primary's data dir is kept, never to run, at %s", pp.cell, to)
		}
	}
	rctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	sb, err := pp.startStandby(rctx, node, prim, false)
	if err != nil {
		return err
	}
	pp.mu.Lock()
	pp.srv[node] = sb
	pp.degraded = false
	if n := len(pp.failovers); n > 0 && pp.failovers[n-1].Restored.IsZero() {
		pp.failovers[n-1].Restored = time.Now()
	}
	pp.mu.Unlock()
	p.logf("%s: standby %s streams from %s (started in %d ms); synchronous replication RESTORED",
		pp.cell, pp.nodes[node].addr(), pp.nodes[1-node].addr(), time.Since(start).Milliseconds())
	_ = p.writeRunInfo()
	return nil
}

// logf writes a line of the launcher's own to its Stderr and to
// logs/platform.log.
func (p *Platform) logf(format string, args ...any) {
	line := time.Now().UTC().Format("2006-01-02T15:04:05.000Z") + " platform: " + fmt.Sprintf(format, args...) + "\n"
	p.outMu.Lock()
	defer p.outMu.Unlock()
	_, _ = p.cfg.Stderr.Write([]byte("[platform] " + line))
	if f, err := os.OpenFile(filepath.Join(p.logDir, "platform.log"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644); err == nil {
		_, _ = f.WriteString(line)
		f.Close()
	}
}

// Standby returns cellID's current standby, or nil: without one
// (Config.NoStandby, DatabaseURL) or while it is being rebuilt after a
// failover.
func (p *Platform) Standby(cellID string) *pgcluster.Cluster {
	pp := p.pairs[cellID]
	if pp == nil {
		return nil
	}
	_, sb := pp.current()
	return sb
}

// Failovers returns the watchdog's failovers of cellID, oldest first.
func (p *Platform) Failovers(cellID string) []Failover {
	pp := p.pairs[cellID]
	if pp == nil {
		return nil
	}
	pp.mu.Lock()
	defer pp.mu.Unlock()
	return append([]Failover(nil), pp.failovers...)
}

// Degraded reports whether cellID's primary runs without a synchronous
// standby (after a failover, until a new standby streams).
func (p *Platform) Degraded(cellID string) bool {
	pp := p.pairs[cellID]
	if pp == nil {
		return false
	}
	pp.mu.Lock()
	defer pp.mu.Unlock()
	return pp.degraded
}
