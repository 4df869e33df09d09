// Package config reads the GTR's routing configuration file (YAML): the
// cells, their pools and weights, and the ordered routing rules. Decoding is
// strict, an unknown key is an error, and the result is validated by
// pkg/routing before the GTR will use it.
package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"

	"gopkg.in/yaml.v3"

	"github.com/cellpay/cellpay/pkg/routing"
)

// File is the YAML form of a routing table.
type File struct {
	// Version identifies the table; every change must raise it.
	Version uint64 `yaml:"version"`
	Cells   []Cell `yaml:"cells"`
	Rules   []Rule `yaml:"rules"`
	// Pools configure pools by name; a pool left out balances round robin.
	Pools []Pool `yaml:"pools"`
}

// Cell is one cell. Weight defaults to 100 when left out. A cell has one
// address (addr: a single instance, or "dns:///name:port" resolved to all
// of them) or lists its instances (addrs), not both. Site, optional, names
// the site the cell runs in (routing.CheckSite's form, such as site-a):
// partners homed in a site are routed to its cells first
// (routing.Pool.SpillBelow).
type Cell struct {
	ID     string   `yaml:"id"`
	Addr   string   `yaml:"addr"`
	Addrs  []string `yaml:"addrs"`
	Pool   string   `yaml:"pool"`
	Weight *int     `yaml:"weight"`
	Site   string   `yaml:"site,omitempty"`
}

// Pool names the balancer a pool's cells use over their instances:
// round_robin (the default), least_request or priority; and its spill
// share, spill_below (percent, 1..100; absent or 0: 50), below which a
// site's healthy capacity no longer keeps its partners' keys at home
// (routing.Pool.SpillBelow).
type Pool struct {
	Name       string `yaml:"name"`
	Balancer   string `yaml:"balancer"`
	SpillBelow int    `yaml:"spill_below,omitempty"`
}

// Rule matches on partner, market and payment type (an empty list matches
// anything) and names a pool and the field to hash (partner by default).
// MinRefdataVersion, when set, keeps the rule's transactions off cells that
// report serving an older reference data version (or none yet).
type Rule struct {
	Name              string   `yaml:"name"`
	Partners          []string `yaml:"partners"`
	Markets           []string `yaml:"markets"`
	PaymentTypes      []string `yaml:"payment_types"`
	Pool              string   `yaml:"pool"`
	HashOn            string   `yaml:"hash_on"`
	MinRefdataVersion uint64   `yaml:"min_refdata_version"`
}

// Load reads, decodes and validates the file at path.
func Load(path string) (routing.Spec, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return routing.Spec{}, fmt.Errorf("config: %w", err)
	}
	spec, err := Parse(b)
	if err != nil {
		return routing.Spec{}, fmt.Errorf("config: %s: %w", path, err)
	}
	return spec, nil
}

// Parse decodes and validates a YAML routing table.
func Parse(b []byte) (routing.Spec, error) {
	var f File
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil {
		if errors.Is(err, io.EOF) {
			return routing.Spec{}, errors.New("empty routing table")
		}
		return routing.Spec{}, err
	}
	return f.Spec()
}

// Spec converts f into a validated routing.Spec.
func (f File) Spec() (routing.Spec, error) {
	s := routing.Spec{Version: f.Version}
	if f.Version == 0 {
		return s, errors.New("version: must be 1 or more")
	}
	for _, c := range f.Cells {
		w := 100
		if c.Weight != nil {
			w = *c.Weight
		}
		s.Cells = append(s.Cells, routing.Cell{ID: c.ID, Addr: c.Addr, Addrs: c.Addrs, Pool: c.Pool, Weight: w, Site: c.Site})
	}
	for i, p := range f.Pools {
		b, err := routing.ParseBalancer(p.Balancer)
		if err != nil {
			return s, fmt.Errorf("pools[%d] %q: balancer: %w", i, p.Name, err)
		}
		s.Pools = append(s.Pools, routing.Pool{Name: p.Name, Balancer: b, SpillBelow: p.SpillBelow})
	}
	for i, r := range f.Rules {
		h, err := routing.ParseHashField(r.HashOn)
		if err != nil {
			return s, fmt.Errorf("rules[%d] %q: hash_on: %w", i, r.Name, err)
		}
		s.Rules = append(s.Rules, routing.Rule{
			Name: r.Name, Partners: r.Partners, Markets: r.Markets, PaymentTypes: r.PaymentTypes,
			Pool: r.Pool, HashOn: h, MinRefdataVersion: r.MinRefdataVersion,
		})
	}
	if err := routing.Validate(s); err != nil {
		return s, err
	}
	return s, nil
}
