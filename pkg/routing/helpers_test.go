package routing

import "strconv"

func itoa(i int) string { return strconv.Itoa(i) }

// ids returns the cell ids of a ranking, for comparing and printing.
func ids(r []Choice) []string {
	out := make([]string, len(r))
	for i, c := range r {
		out[i] = c.Cell.ID
	}
	return out
}

func mustCompile(t interface {
	Helper()
	Fatalf(string, ...any)
}, s Spec) *Table {
	t.Helper()
	tbl, err := Compile(s)
	if err != nil {
		t.Fatalf("Compile: %v", err)
	}
	return tbl
}
