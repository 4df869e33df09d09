package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cellpay/cellpay/pkg/api/apierr"
)

// guideCommand is one command line of the partner guide, as printed.
type guideCommand struct {
	file string // docs/partners/<file>
	line int    // where it starts
	cmd  string // the command, continuation lines joined as bash reads them
	// What its trailing comment ("# → ...") says it prints: an HTTP status
	// (REST; 0 for grpcurl), then words of the output. A refusal's word is
	// its ErrorInfo reason.
	status int
	words  []string
}

// guideArrow starts a command's expected answer, a comment at its end.
const guideArrow = "# →"

// guideCommands reads every command of the partner guide's ```sh blocks
// that starts with curl or bin/grpcurl, with its continuation lines.
func guideCommands(t *testing.T) []guideCommand {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(env.root, "docs", "partners", "*.md"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no docs/partners/*.md: %v", err)
	}
	slices.Sort(files)
	var cmds []guideCommand
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		inSh := false
		var cur *guideCommand
		sc := bufio.NewScanner(bytes.NewReader(b))
		sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
		for n := 1; sc.Scan(); n++ {
			line := sc.Text()
			switch {
			case !inSh && strings.TrimSpace(line) == "```sh":
				inSh = true
				continue
			case inSh && strings.TrimSpace(line) == "```":
				if cur != nil {
					t.Errorf("%s:%d: the block ends inside a command", filepath.Base(f), cur.line)
					cur = nil
				}
				inSh = false
				continue
			case !inSh:
				continue
			}
			if cur == nil && (strings.HasPrefix(line, "curl ") || strings.HasPrefix(line, "bin/grpcurl ")) {
				cur = &guideCommand{file: filepath.Base(f), line: n}
			}
			if cur == nil {
				continue
			}
			if strings.HasSuffix(line, `\`) {
				cur.cmd += line + "\n"
				continue
			}
			cur.cmd += line
			cmds = append(cmds, expectation(t, *cur))
			cur = nil
		}
		if err := sc.Err(); err != nil {
			t.Fatal(err)
		}
	}
	return cmds
}

// expectation reads c's trailing "# → [status] words..." comment.
func expectation(t *testing.T, c guideCommand) guideCommand {
	t.Helper()
	i := strings.LastIndex(c.cmd, guideArrow)
	if i < 0 {
		t.Errorf("%s:%d: no %q comment saying what it prints", c.file, c.line, guideArrow)
		return c
	}
	c.words = strings.Fields(c.cmd[i+len(guideArrow):])
	if len(c.words) > 0 {
		if s, err := strconv.Atoi(c.words[0]); err == nil {
			c.status, c.words = s, c.words[1:]
		}
	}
	rest := strings.HasPrefix(c.cmd, "curl ")
	switch {
	case rest && c.status == 0:
		t.Errorf("%s:%d: a curl line's comment starts with the HTTP status", c.file, c.line)
	case !rest && c.status != 0:
		t.Errorf("%s:%d: a grpcurl line's comment has no HTTP status", c.file, c.line)
	case c.status >= 400 && (len(c.words) == 0 || !slices.Contains(apierr.All(), apierr.Reason(c.words[0]))):
		t.Errorf("%s:%d: a refusal's comment names its reason first (%q)", c.file, c.line, c.words)
	}
	return c
}

// curlStatus is how the test's curl configuration reports each answer's
// HTTP status, on stderr, leaving the output as the reader sees it.
var curlStatus = regexp.MustCompile(`guide-test-http-status: (\d{3})`)

// TestPartnerGuideCurl runs the partner guide's command lines
// (docs/partners/*.md) exactly as printed: every line of a ```sh block that
// starts with curl (REST) or bin/grpcurl (gRPC), with its continuation
// lines, through bash in a directory laid out as make run's (.cellpay is
// the platform's data directory, bin its binaries), with make run's
// addresses replaced by the test platform's. Each must exit 0 and print
// what its trailing comment says: "# → 200 APPROVED" (the HTTP status, a
// JSON body, the words in it), "# → 401 API_KEY_MISSING" (a refusal: a
// google.rpc.Status body whose ErrorInfo has that reason and a request
// ID), or for grpcurl "# → APPROVED" (JSON holding the words).
func TestPartnerGuideCurl(t *testing.T) {
	if _, err := exec.LookPath("curl"); err != nil {
		t.Fatal("curl is not installed; the partner guide's commands need it")
	}
	cmds := guideCommands(t)
	if t.Failed() {
		t.FailNow()
	}
	if n := len(cmds); n < 10 {
		t.Fatalf("%d commands in docs/partners/*.md: the guide has lost its examples", n)
	}
	dir := t.TempDir()
	data, err := filepath.Abs(env.p.Config().DataDir)
	if err != nil {
		t.Fatal(err)
	}
	bin, err := filepath.Abs(env.bin)
	if err != nil {
		t.Fatal(err)
	}
	for name, target := range map[string]string{".cellpay": data, "bin": bin} {
		if err := os.Symlink(target, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	// curl reads $CURL_HOME/.curlrc: the status goes to stderr, where the
	// reader's terminal would not show it among the output.
	curlHome := t.TempDir()
	rc := "silent\nshow-error\nwrite-out = \"%{stderr}\\nguide-test-http-status: %{http_code}\\n\"\n"
	if err := os.WriteFile(filepath.Join(curlHome, ".curlrc"), []byte(rc), 0o600); err != nil {
		t.Fatal(err)
	}
	addrs := strings.NewReplacer(
		"127.0.0.1:7060", env.restAddr, "127.0.0.1:7160", env.backupRESTAddr,
		"127.0.0.1:7070", env.gtrAddr, "127.0.0.1:7170", env.backupAddr)
	for _, c := range cmds {
		if strings.Contains(c.cmd, "-insecure") || strings.Contains(c.cmd, " -k ") {
			t.Errorf("%s:%d: the guide turns TLS verification off", c.file, c.line)
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		cmd := exec.CommandContext(ctx, "bash", "-c", addrs.Replace(c.cmd))
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "CURL_HOME="+curlHome, "NO_PROXY=127.0.0.1,localhost", "no_proxy=127.0.0.1,localhost")
		cmd.WaitDelay = 5 * time.Second
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		cancel()
		where := c.file + ":" + strconv.Itoa(c.line)
		t.Logf("%s\n$ %s\n%s", where, c.cmd, stdout.Bytes())
		if err != nil {
			t.Errorf("%s: exit: %v\n%s", where, err, stderr.Bytes())
			continue
		}
		body := stdout.Bytes()
		for bytes.HasPrefix(body, []byte("HTTP/")) { // curl -i: the headers, then the body
			_, after, ok := bytes.Cut(body, []byte("\r\n\r\n"))
			if !ok {
				break
			}
			body = after
		}
		if !json.Valid(body) {
			t.Errorf("%s: the output is not a JSON body:\n%s", where, stdout.Bytes())
			continue
		}
		if c.status != 0 {
			m := curlStatus.FindSubmatch(stderr.Bytes())
			if m == nil {
				t.Errorf("%s: no HTTP status from curl:\n%s", where, stderr.Bytes())
				continue
			}
			if got, _ := strconv.Atoi(string(m[1])); got != c.status {
				t.Errorf("%s: HTTP %d, the guide says %d:\n%s", where, got, c.status, body)
				continue
			}
		}
		words := c.words
		if c.status >= 400 && len(words) > 0 {
			reason, id := guideRefusal(body)
			if reason != words[0] || id == "" {
				t.Errorf("%s: the refusal's reason %q (request ID %q), the guide says %s:\n%s", where, reason, id, words[0], body)
			}
			words = words[1:]
		}
		for _, w := range words {
			if !bytes.Contains(stdout.Bytes(), []byte(w)) {
				t.Errorf("%s: the output lacks %q, which the guide says it prints:\n%s", where, w, stdout.Bytes())
			}
		}
	}
}

// guideRefusal reads a REST refusal's ErrorInfo (google.rpc.Status in
// JSON): its reason and request ID, empty where absent.
func guideRefusal(body []byte) (reason, requestID string) {
	var st struct {
		Details []struct {
			Type     string            `json:"@type"`
			Reason   string            `json:"reason"`
			Domain   string            `json:"domain"`
			Metadata map[string]string `json:"metadata"`
		} `json:"details"`
	}
	if json.Unmarshal(body, &st) != nil {
		return "", ""
	}
	for _, d := range st.Details {
		if strings.HasSuffix(d.Type, "/google.rpc.ErrorInfo") && d.Domain == apierr.Domain {
			return d.Reason, d.Metadata[apierr.MetadataRequestID]
		}
	}
	return "", ""
}
