package platform

import (
	"bytes"
	"io"
	"sync"
)

// prefixWriter writes whole lines to a shared destination, each prefixed
// with "[name] ", so the output of concurrent children interleaves by line,
// never mid-line. It holds back a partial line until its newline arrives or
// flush is called.
type prefixWriter struct {
	prefix []byte
	dst    io.Writer
	dstMu  *sync.Mutex

	mu      sync.Mutex
	partial []byte
}

// newPrefixWriter returns a writer of name's lines to w. Every writer of a
// platform shares outMu, so lines stay whole even when Stdout and Stderr are
// the same writer.
func newPrefixWriter(name string, w io.Writer, outMu *sync.Mutex) *prefixWriter {
	return &prefixWriter{prefix: []byte("[" + name + "] "), dst: w, dstMu: outMu}
}

func (p *prefixWriter) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.partial = append(p.partial, b...)
	i := bytes.LastIndexByte(p.partial, '\n')
	if i < 0 {
		return len(b), nil
	}
	var out []byte
	for _, line := range bytes.SplitAfter(p.partial[:i+1], []byte("\n")) {
		if len(line) > 0 {
			out = append(append(out, p.prefix...), line...)
		}
	}
	p.partial = append(p.partial[:0], p.partial[i+1:]...)
	p.write(out)
	// The log file has the output already; a failing terminal must not
	// make the child's writes fail.
	return len(b), nil
}

// flush writes a held-back partial line, newline-terminated.
func (p *prefixWriter) flush() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.partial) == 0 {
		return
	}
	out := append(append(append([]byte(nil), p.prefix...), p.partial...), '\n')
	p.partial = p.partial[:0]
	p.write(out)
}

func (p *prefixWriter) write(b []byte) {
	p.dstMu.Lock()
	defer p.dstMu.Unlock()
	_, _ = p.dst.Write(b)
}
