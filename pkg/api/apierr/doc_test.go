package apierr

import (
	"net/http"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/grpc/codes"
)

// errorsPage is the partner guide's page of the reasons.
const errorsPage = "../../../docs/partners/errors.md"

// reasonComment finds each reason's constant with the gRPC code its
// comment names: "// Name (CODE): ..." up to `Name Reason = "REASON"`.
var reasonComment = regexp.MustCompile(`(?s)// (\w+) \(([A-Z_]+)\):.*?\n\t(\w+) +Reason = "([A-Z_]+)"`)

// reasonCodes reads apierr.go's comments: the gRPC code of each reason.
func reasonCodes(t *testing.T) map[Reason]codes.Code {
	t.Helper()
	src, err := os.ReadFile("apierr.go")
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]codes.Code{}
	for c := codes.OK; c <= codes.Unauthenticated; c++ {
		byName[strings.ToUpper(codeName(c))] = c
	}
	out := map[Reason]codes.Code{}
	for _, m := range reasonComment.FindAllStringSubmatch(string(src), -1) {
		if m[1] != m[3] {
			t.Fatalf("apierr.go: the comment of %s names %s", m[3], m[1])
		}
		c, ok := byName[m[2]]
		if !ok {
			t.Fatalf("apierr.go: %s's comment names %q, no gRPC code", m[3], m[2])
		}
		out[Reason(m[4])] = c
	}
	return out
}

// codeName is c's name as the docs write it: UNAUTHENTICATED, CANCELLED.
func codeName(c codes.Code) string {
	switch c {
	case codes.OK:
		return "OK"
	case codes.Canceled:
		return "CANCELLED"
	}
	var b strings.Builder
	for i, r := range c.String() {
		if i > 0 && r >= 'A' && r <= 'Z' {
			b.WriteByte('_')
		}
		b.WriteRune(r)
	}
	return strings.ToUpper(b.String())
}

// TestErrorsPageListsAll: docs/partners/errors.md's table of reasons
// lists exactly All(), each once, each with the gRPC code its comment in
// apierr.go names and the HTTP status the REST API answers with (grpc-
// gateway's for the code, but 413 for REQUEST_TOO_LARGE and 404 for
// NOT_SUPPORTED's unknown path), and says whether to retry.
func TestErrorsPageListsAll(t *testing.T) {
	page, err := os.ReadFile(errorsPage)
	if err != nil {
		t.Fatal(err)
	}
	want := reasonCodes(t)
	if len(want) != len(All()) {
		t.Fatalf("apierr.go: %d reasons with a code in their comment, All() has %d", len(want), len(All()))
	}
	seen := map[Reason]int{}
	for n, line := range strings.Split(string(page), "\n") {
		cells := strings.Split(strings.Trim(strings.TrimSpace(line), "|"), "|")
		if len(cells) < 6 {
			continue
		}
		for i := range cells {
			cells[i] = strings.TrimSpace(cells[i])
		}
		r, ok := strings.CutPrefix(cells[0], "`")
		if !ok || !strings.HasSuffix(r, "`") || strings.Trim(cells[1], "`") == cells[1] {
			continue // not a row of the reasons' table
		}
		reason := Reason(strings.TrimSuffix(r, "`"))
		where := errorsPage + ":" + strconv.Itoa(n+1) + ": " + string(reason)
		seen[reason]++
		code, known := want[reason]
		if !known {
			t.Errorf("%s: no such reason in apierr.All()", where)
			continue
		}
		if got := strings.Trim(cells[1], "`"); got != codeName(code) {
			t.Errorf("%s: gRPC code %s, apierr.go says %s", where, got, codeName(code))
		}
		status := runtime.HTTPStatusFromCode(code)
		switch reason {
		case RequestTooLarge:
			status = http.StatusRequestEntityTooLarge
		case NotSupported:
			status = http.StatusNotFound
		}
		if f := strings.Fields(cells[2]); len(f) == 0 || f[0] != strconv.Itoa(status) {
			t.Errorf("%s: HTTP %q, the REST API answers %d", where, cells[2], status)
		}
		if retry := cells[len(cells)-1]; !strings.HasPrefix(retry, "yes") && !strings.HasPrefix(retry, "no") {
			t.Errorf("%s: the last column %q says neither yes nor no (retry unchanged?)", where, retry)
		}
	}
	for _, r := range All() {
		if seen[r] != 1 {
			t.Errorf("%s: %s is listed %d times, want once", errorsPage, r, seen[r])
		}
	}
}
