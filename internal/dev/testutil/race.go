//go:build race

package testutil

// Race reports whether the race detector is on: allocation counts are not
// those of a normal build then (sync.Pool drops items on purpose, for one),
// so allocation budgets are checked without it.
const Race = true
