package pgcluster

import (
	"io"
	"os"
	"strings"
	"sync"
	"syscall"
)

// tailSize is how much of the server log an error quotes.
const tailSize = 4 << 10

// logSink is where the server log goes, and remembers its end for errors.
// With no writer configured the server writes straight into a file (no pipe,
// nothing for us to copy, and it keeps logging if we die); otherwise its
// output is copied to the writer and into a small ring.
type logSink struct {
	path string    // used when w is nil
	w    io.Writer // the configured writer, or nil
	tail *ring     // used when w is set
	// owner, when set, is given the file: a base backup of the data dir
	// it lies in reads it as the server user.
	owner *syscall.Credential
}

func newLogSink(w io.Writer, path string, owner *syscall.Credential) logSink {
	if w == nil {
		return logSink{path: path, owner: owner}
	}
	return logSink{w: w, tail: &ring{}}
}

// writer returns the destination for one server run; call done once the
// process has started.
func (l logSink) writer() (w io.Writer, done func(), err error) {
	if l.w != nil {
		return io.MultiWriter(l.w, l.tail), func() {}, nil
	}
	f, err := os.OpenFile(l.path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return nil, nil, err
	}
	if l.owner != nil {
		_ = f.Chown(int(l.owner.Uid), int(l.owner.Gid))
	}
	return f, func() { f.Close() }, nil
}

// record appends output of ours (initdb's) to the log.
func (l logSink) record(p []byte) error {
	w, done, err := l.writer()
	if err != nil {
		return err
	}
	defer done()
	_, err = w.Write(p)
	return err
}

// tailSection returns the end of the log formatted to follow an error
// message, or "" when there is nothing to show.
func (l logSink) tailSection() string {
	t := strings.TrimSpace(l.tailText())
	if t == "" {
		return ""
	}
	return "\n--- postgres log (tail) ---\n" + t
}

func (l logSink) tailText() string {
	if l.w != nil {
		return l.tail.String()
	}
	return TailFile(l.path, tailSize)
}

// TailFile returns the last n bytes of the file at path, or "" when it
// cannot be read: error messages quote the end of a log with it.
func TailFile(path string, n int64) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return ""
	}
	off := max(fi.Size()-n, 0)
	buf := make([]byte, fi.Size()-off)
	got, _ := f.ReadAt(buf, off)
	return string(buf[:got])
}

// ring keeps the last tailSize bytes written to it.
type ring struct {
	mu  sync.Mutex
	buf []byte
}

func (r *ring) Write(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.buf = append(r.buf, p...)
	if over := len(r.buf) - tailSize; over > 0 {
		r.buf = append(r.buf[:0], r.buf[over:]...)
	}
	return len(p), nil
}

func (r *ring) String() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return string(r.buf)
}
