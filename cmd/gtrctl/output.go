package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/schollz/progressbar/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"gopkg.in/yaml.v3"

	"github.com/cellpay/cellpay/pkg/adminproto"
	"github.com/cellpay/cellpay/pkg/routing"
)

func (c *cli) printJSON(m proto.Message) error {
	b, err := protojson.MarshalOptions{Multiline: true, EmitUnpopulated: true}.Marshal(m)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(c.out, string(b))
	return err
}

func (c *cli) printCells(resp *adminproto.ListCellsResponse) error {
	if c.json() {
		return c.printJSON(resp)
	}
	fmt.Fprintf(c.out, "table version %d, replica %s, config store %s\n\n", resp.GetTableVersion(), resp.GetReplicaId(), resp.GetConfigStore())
	tw := tabwriter.NewWriter(c.out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SITE\tCELL\tPOOL\tHEALTH\tREPLICAS\tINSTANCES\tWEIGHT\tTARGET\tTABLE\tIN-FLIGHT\tSUCCESS\tSHARE\tREFDATA\tRAMP")
	var down, split []string
	for _, cs := range bySite(resp.GetCells()) {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%d\t%d\t%d\t%d\t%s\t%.1f%%\t%s\t%s\n",
			orDash(cs.GetSite()), cs.GetId(), cs.GetPool(), health(cs), replicasUp(cs), instances(cs), cs.GetWeight(), cs.GetTargetWeight(), cs.GetTableWeight(),
			cs.GetInFlight(), success(cs), 100*cs.GetTrafficShare(), refdataVersion(cs), ramp(cs.GetRamp()))
		for _, v := range cs.GetReplicas() {
			if (v.GetHealthShare() > 0) != (cs.GetHealthShare() > 0) {
				split = append(split, fmt.Sprintf("  %s: replica %s (site %s) sees health %d%%, in flight %d", cs.GetId(), v.GetReplica(), orDash(v.GetSite()), v.GetHealthShare(), v.GetInFlight()))
			}
		}
		for _, in := range cs.GetInstances() {
			if in.GetHealth() == adminproto.Health_HEALTH_DOWN {
				down = append(down, fmt.Sprintf("  %s %s: %s", cs.GetId(), in.GetAddr(), in.GetDetail()))
			}
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(down) > 0 {
		fmt.Fprintf(c.out, "\ninstances down (-o json for every instance):\n%s\n", strings.Join(down, "\n"))
	}
	if len(split) > 0 {
		fmt.Fprintf(c.out, "\nreplicas that judge a cell otherwise than replica %s (-o json for every view):\n%s\n", resp.GetReplicaId(), strings.Join(split, "\n"))
	}
	return nil
}

// bySite is cells ordered by site, then cell ID, cells of no named site
// last: an operator reads a site's cells together. The answer's own order
// (the table's) is left as it was.
func bySite(cells []*adminproto.CellStatus) []*adminproto.CellStatus {
	out := slices.Clone(cells)
	slices.SortStableFunc(out, func(a, b *adminproto.CellStatus) int {
		return routing.CompareBySite(a.GetSite(), a.GetId(), b.GetSite(), b.GetId())
	})
	return out
}

// replicasUp is "2/2 up": the GTR replicas whose own health monitor
// counts the cell up, of those that answered; "-" from a GTR that does
// not ask the others.
func replicasUp(cs *adminproto.CellStatus) string {
	vs := cs.GetReplicas()
	if len(vs) == 0 {
		return "-"
	}
	up := 0
	for _, v := range vs {
		if v.GetHealthShare() > 0 {
			up++
		}
	}
	return fmt.Sprintf("%d/%d up", up, len(vs))
}

// instances is "2/2 up" (instances serving of those checked) and the
// balancer over them, or "-" from a GTR that does not report instances.
func instances(cs *adminproto.CellStatus) string {
	in := cs.GetInstances()
	if len(in) == 0 && cs.GetBalancer() == "" {
		return "-"
	}
	up := 0
	for _, i := range in {
		if i.GetHealth() == adminproto.Health_HEALTH_UP {
			up++
		}
	}
	s := fmt.Sprintf("%d/%d up", up, len(in))
	if b := cs.GetBalancer(); b != "" && b != "round_robin" {
		s += " (" + b + ")"
	}
	return s
}

// refdataVersion is the reference data version the cell reported to the
// answering replica: "v3", or "-" when it never reported.
func refdataVersion(cs *adminproto.CellStatus) string {
	if cs.GetRefdataSince() == nil {
		return "-"
	}
	return fmt.Sprintf("v%d", cs.GetRefdataVersion())
}

// printExplain prints the GTR's rendering of an explanation, then, for a
// rule that needs fresh reference data, which cells it skipped as stale.
func (c *cli) printExplain(resp *adminproto.ExplainResponse) error {
	if c.json() {
		return c.printJSON(resp)
	}
	fmt.Fprint(c.out, resp.GetText())
	var stale []string
	for _, cv := range resp.GetCells() {
		if cv.GetVerdict() == staleVerdict {
			v := "none known"
			if cv.GetRefdataVersion() > 0 {
				v = fmt.Sprintf("v%d", cv.GetRefdataVersion())
			}
			stale = append(stale, fmt.Sprintf("%s (%s)", cv.GetCellId(), v))
		}
	}
	if len(stale) > 0 {
		fmt.Fprintf(c.out, "stale for this rule (needs reference data v%d): %s\n", resp.GetMinRefdataVersion(), strings.Join(stale, ", "))
	}
	if resp.GetError() != "" {
		fmt.Fprintln(c.out, "result:", resp.GetError())
	}
	return nil
}

// staleVerdict is routing.VerdictStale's name, as the admin API sends it.
const staleVerdict = "skipped: stale reference data"

func health(cs *adminproto.CellStatus) string {
	switch {
	case cs.GetHealth() == adminproto.Health_HEALTH_DOWN:
		return "down"
	case cs.GetHealthShare() > 0 && cs.GetHealthShare() < 100:
		return fmt.Sprintf("up %d%%", cs.GetHealthShare())
	}
	return "up"
}

func success(cs *adminproto.CellStatus) string {
	if cs.GetSuccessRate() < 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f%% of %d", 100*cs.GetSuccessRate(), cs.GetRecentRequests())
}

func ramp(r *adminproto.Ramp) string {
	if r == nil {
		return "-"
	}
	left := time.Until(r.GetEnd().AsTime()).Round(time.Second)
	return fmt.Sprintf("%d->%d, %v left", r.GetFromWeight(), r.GetToWeight(), max(left, 0))
}

func (c *cli) printCellChange(cs *adminproto.CellStatus) {
	fmt.Fprintf(c.out, "%s: weight %d", cs.GetId(), cs.GetWeight())
	if r := cs.GetRamp(); r != nil {
		fmt.Fprintf(c.out, ", ramping to %d by %s", r.GetToWeight(), r.GetEnd().AsTime().Local().Format(time.TimeOnly))
	}
	fmt.Fprintf(c.out, " (table weight %d)\n", cs.GetTableWeight())
}

// follow shows the progress of cells' ramps (desc names them) until
// every one's weight reaches its target, then prints head, when not
// empty, and each cell as it is then (printCellChange). Interrupting it
// (Ctrl-C) leaves the ramps running on the GTRs.
func (c *cli) follow(ctx context.Context, desc string, cells []*adminproto.CellStatus, head string) error {
	from, steps := map[string]int{}, 0
	for _, cs := range cells {
		if r := cs.GetRamp(); r != nil {
			f, to := int(r.GetFromWeight()), int(r.GetToWeight())
			from[cs.GetId()] = f
			steps += max(f-to, to-f)
		}
	}
	bar := progressbar.NewOptions(steps,
		progressbar.OptionSetWriter(c.errOut),
		progressbar.OptionSetDescription(desc),
		progressbar.OptionShowCount(),
		progressbar.OptionThrottle(100*time.Millisecond),
		progressbar.OptionClearOnFinish(),
	)
	defer bar.Exit()
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for {
		cctx, cancel := c.call(ctx)
		resp, err := c.client.ListCells(cctx, &adminproto.ListCellsRequest{})
		cancel()
		if err != nil {
			return err
		}
		byID := map[string]*adminproto.CellStatus{}
		for _, x := range resp.GetCells() {
			byID[x.GetId()] = x
		}
		cur := make([]*adminproto.CellStatus, 0, len(cells))
		done, ramping := 0, false
		for _, cs := range cells {
			x := byID[cs.GetId()]
			if x == nil {
				return fmt.Errorf("cell %s left the table during the ramp", cs.GetId())
			}
			cur = append(cur, x)
			if f, ok := from[x.GetId()]; ok {
				w := int(x.GetWeight())
				done += max(w-f, f-w)
			}
			ramping = ramping || x.GetRamp() != nil
		}
		_ = bar.Set(done)
		if !ramping {
			_ = bar.Finish()
			if head != "" {
				fmt.Fprintln(c.out, head)
			}
			for _, x := range cur {
				c.printCellChange(x)
			}
			return nil
		}
		select {
		case <-ctx.Done():
			fmt.Fprintln(c.errOut, "\nstopped following; the ramp goes on")
			return nil
		case <-tick.C:
		}
	}
}

func (c *cli) printApply(resp *adminproto.ApplyTableResponse) error {
	if c.json() {
		return c.printJSON(resp)
	}
	if resp.GetApplied() {
		fmt.Fprintf(c.out, "table version %d applied\n", resp.GetVersion())
		return nil
	}
	fmt.Fprintf(c.out, "dry run of table version %d over %d sampled keys (nothing changed):\n\n", resp.GetVersion(), resp.GetSamples())
	return c.printMoves(resp.GetMoves())
}

// printMoves prints a dry run's moves, FROM TO KEYS SHARE (a key that
// stays as "(stays)"), then the share of the keys that would move.
func (c *cli) printMoves(moves []*adminproto.Move) error {
	tw := tabwriter.NewWriter(c.out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "FROM\tTO\tKEYS\tSHARE")
	moved := 0.0
	for _, m := range moves {
		to := m.GetToCell()
		if to == m.GetFromCell() {
			to = "(stays)"
		} else {
			moved += m.GetShare()
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%.2f%%\n", orNone(m.GetFromCell()), orNone(to), m.GetKeys(), 100*m.GetShare())
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(c.out, "\n%.2f%% of keys would move\n", 100*moved)
	return nil
}

// siteVerb is what a site command (evacuate, restore-site) does, for its
// output.
type siteVerb struct {
	// doing and done name the change: "evacuating", "evacuated".
	doing, done string
	// to is the weight a cell of the site goes to.
	to func(cs *adminproto.CellStatus) int32
}

var (
	evacuation  = siteVerb{"evacuating", "evacuated", func(*adminproto.CellStatus) int32 { return 0 }}
	restoration = siteVerb{"restoring", "restored", func(cs *adminproto.CellStatus) int32 { return cs.GetTableWeight() }}
)

// printSiteDryRun prints a site command's dry run as table apply's: the
// sampled keys that would move, from which cell to which (once a ramp
// over over has ended), then each cell of the site as it is and where it
// would go.
func (c *cli) printSiteDryRun(resp *adminproto.SiteChange, v siteVerb, over time.Duration) error {
	when := ""
	if over > 0 {
		when = fmt.Sprintf(", homes once the %v ramp has ended", over)
	}
	fmt.Fprintf(c.out, "dry run of %s site %s (table version %d) over %d sampled keys%s (nothing changed):\n\n", v.doing, resp.GetSite(), resp.GetVersion(), resp.GetSamples(), when)
	if err := c.printMoves(resp.GetMoves()); err != nil {
		return err
	}
	fmt.Fprintf(c.out, "\ncells of site %s:\n", resp.GetSite())
	for _, cs := range resp.GetCells() {
		fmt.Fprintf(c.out, "%s: weight %d, would go to %d (table weight %d)\n", cs.GetId(), cs.GetWeight(), v.to(cs), cs.GetTableWeight())
	}
	return nil
}

// siteHead is the line above a site change's cells.
func siteHead(resp *adminproto.SiteChange, v siteVerb) string {
	return fmt.Sprintf("site %s %s, table version %d:", resp.GetSite(), v.done, resp.GetVersion())
}

func orNone(s string) string {
	if s == "" {
		return "(unrouted)"
	}
	return s
}

// tableFile is the GTR's YAML config format (cmd/gtr/internal/config),
// which table get prints and table apply reads.
type tableFile struct {
	Version uint64      `yaml:"version" json:"version"`
	Cells   []tableCell `yaml:"cells" json:"cells"`
	Rules   []tableRule `yaml:"rules" json:"rules"`
	Pools   []tablePool `yaml:"pools,omitempty" json:"pools,omitempty"`
}

// tableCell has addr (one address) or addrs (its instances), not both.
type tableCell struct {
	ID     string   `yaml:"id" json:"id"`
	Addr   string   `yaml:"addr,omitempty" json:"addr,omitempty"`
	Addrs  []string `yaml:"addrs,omitempty,flow" json:"addrs,omitempty"`
	Pool   string   `yaml:"pool" json:"pool"`
	Weight *int     `yaml:"weight" json:"weight"`
	Site   string   `yaml:"site,omitempty" json:"site,omitempty"`
}

// tablePool names a pool's balancer (round_robin, least_request or
// priority) and its spill share (1..100; 0: 50).
type tablePool struct {
	Name       string `yaml:"name" json:"name"`
	Balancer   string `yaml:"balancer" json:"balancer"`
	SpillBelow int    `yaml:"spill_below,omitempty" json:"spill_below,omitempty"`
}

type tableRule struct {
	Name         string   `yaml:"name" json:"name"`
	Partners     []string `yaml:"partners,omitempty" json:"partners,omitempty"`
	Markets      []string `yaml:"markets,omitempty" json:"markets,omitempty"`
	PaymentTypes []string `yaml:"payment_types,omitempty" json:"payment_types,omitempty"`
	Pool         string   `yaml:"pool" json:"pool"`
	HashOn       string   `yaml:"hash_on,omitempty" json:"hash_on,omitempty"`
	// MinRefdataVersion: cells reporting older reference data are skipped
	// for this rule.
	MinRefdataVersion uint64 `yaml:"min_refdata_version,omitempty" json:"min_refdata_version,omitempty"`
}

// parseTable reads a table file strictly, so a misspelt key is an error
// rather than a silently missing field: JSON (what table get -o json
// prints, or the same with snake_case names) as the API's Table, anything
// else as YAML. A cell without a weight takes 100 in either.
func parseTable(b []byte) (*adminproto.Table, error) {
	if t := bytes.TrimSpace(b); len(t) > 0 && t[0] == '{' {
		return parseTableJSON(t)
	}
	var f tableFile
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, errors.New("empty table file")
		}
		return nil, err
	}
	t := &adminproto.Table{Version: f.Version}
	for _, c := range f.Cells {
		w := int32(100)
		if c.Weight != nil {
			w = int32(*c.Weight)
		}
		t.Cells = append(t.Cells, &adminproto.Cell{Id: c.ID, Addr: c.Addr, Addrs: c.Addrs, Pool: c.Pool, Weight: w, Site: c.Site})
	}
	for _, p := range f.Pools {
		t.Pools = append(t.Pools, &adminproto.Pool{Name: p.Name, Balancer: p.Balancer, SpillBelow: int32(p.SpillBelow)})
	}
	for _, r := range f.Rules {
		t.Rules = append(t.Rules, &adminproto.Rule{Name: r.Name, Partners: r.Partners, Markets: r.Markets,
			PaymentTypes: r.PaymentTypes, Pool: r.Pool, HashOn: r.HashOn, MinRefdataVersion: r.MinRefdataVersion})
	}
	return t, nil
}

func parseTableJSON(b []byte) (*adminproto.Table, error) {
	t := &adminproto.Table{}
	if err := protojson.Unmarshal(b, t); err != nil {
		return nil, err
	}
	// protojson cannot tell a weight left out from a weight of 0.
	var raw struct {
		Cells []map[string]json.RawMessage `json:"cells"`
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		return nil, err
	}
	for i, c := range raw.Cells {
		if _, ok := c["weight"]; !ok && i < len(t.Cells) {
			t.Cells[i].Weight = 100
		}
	}
	return t, nil
}

// printEffective prints a replica's effective view, labelled as such, so
// that nobody mistakes it for a table to apply.
func (c *cli) printEffective(e *adminproto.EffectiveTable) error {
	if c.json() {
		return c.printJSON(e)
	}
	fmt.Fprintf(c.out, "EFFECTIVE view of replica %s, table version %d: weights as routing uses them on this replica\n", e.GetReplicaId(), e.GetVersion())
	fmt.Fprintln(c.out, "(derived from health and ramps; not a table to apply: gtrctl table get prints the operator's table)")
	fmt.Fprintln(c.out)
	tw := tabwriter.NewWriter(c.out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "CELL\tPOOL\tCONFIGURED\tRAMP-NOW\tHEALTH\tEFFECTIVE\tSTATE\tREFDATA")
	for _, ec := range e.GetCells() {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d%%\t%d\t%s\tv%d\n", ec.GetId(), ec.GetPool(), ec.GetConfiguredWeight(), ec.GetRampWeight(),
			ec.GetHealthShare(), ec.GetEffectiveWeight(), ec.GetState(), ec.GetRefdataVersion())
	}
	return tw.Flush()
}

func writeTableYAML(w io.Writer, t *adminproto.Table) error {
	f := tableFile{Version: t.GetVersion()}
	for _, c := range t.GetCells() {
		wt := int(c.GetWeight())
		f.Cells = append(f.Cells, tableCell{ID: c.GetId(), Addr: c.GetAddr(), Addrs: c.GetAddrs(), Pool: c.GetPool(), Weight: &wt, Site: c.GetSite()})
	}
	for _, p := range t.GetPools() {
		f.Pools = append(f.Pools, tablePool{Name: p.GetName(), Balancer: p.GetBalancer(), SpillBelow: int(p.GetSpillBelow())})
	}
	for _, r := range t.GetRules() {
		f.Rules = append(f.Rules, tableRule{Name: r.GetName(), Partners: r.GetPartners(), Markets: r.GetMarkets(),
			PaymentTypes: r.GetPaymentTypes(), Pool: r.GetPool(), HashOn: r.GetHashOn(), MinRefdataVersion: r.GetMinRefdataVersion()})
	}
	fmt.Fprintln(w, "# The operator's routing table (configured weights, not this replica's health). Raise version, edit, then: gtrctl table apply -f FILE --dry-run")
	enc := yaml.NewEncoder(w)
	enc.SetIndent(2)
	if err := enc.Encode(f); err != nil {
		return err
	}
	return enc.Close()
}
