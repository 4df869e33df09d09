package telemetry

import (
	"sync"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// attrCache keeps one measurement option per combination of (at most two)
// attribute values, so that recording with attributes from a small closed
// set (statuses, codes, cell IDs) does not allocate after the first time.
type attrCache struct {
	k1, k2 string // k2 "" for one attribute
	mu     sync.RWMutex
	m      map[[2]string]*opts
}

// opts are ready-made variadic arguments: passing a slice we keep, rather
// than a fresh one per call, is what keeps recording allocation-free.
type opts struct {
	add []metric.AddOption
	rec []metric.RecordOption
	obs []metric.ObserveOption
}

func newAttrCache(k1, k2 string) *attrCache {
	return &attrCache{k1: k1, k2: k2, m: map[[2]string]*opts{}}
}

// of returns the option for the values v1 (of k1) and v2 (of k2, ignored
// without one).
func (c *attrCache) of(v1, v2 string) *opts {
	key := [2]string{v1, v2}
	c.mu.RLock()
	o, ok := c.m[key]
	c.mu.RUnlock()
	if ok {
		return o
	}
	attrs := []attribute.KeyValue{attribute.String(c.k1, v1)}
	if c.k2 != "" {
		attrs = append(attrs, attribute.String(c.k2, v2))
	}
	set := metric.WithAttributeSet(attribute.NewSet(attrs...))
	o = &opts{add: []metric.AddOption{set}, rec: []metric.RecordOption{set}, obs: []metric.ObserveOption{set}}
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.m) < maxAttrSets {
		c.m[key] = o
	}
	return o
}

// maxAttrSets bounds a cache that a bug fed unbounded values.
const maxAttrSets = 1024
