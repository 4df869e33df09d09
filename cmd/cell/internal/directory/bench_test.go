package directory

import (
	"context"
	"io"
	"log/slog"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cellpay/cellpay/internal/dev/testutil"
	"github.com/cellpay/cellpay/internal/dev/testutil/natstest"
	"github.com/cellpay/cellpay/internal/tlsconf"
	"github.com/cellpay/cellpay/pkg/api/cellpayv1"
	"github.com/cellpay/cellpay/pkg/idempotency"
)

// BenchmarkClaim is the directory's cost on a transaction's path: the
// claim (a write to an empty key) and, off the path, the owner's final
// state on top of it (FinalizeAt), on a real NATS server in this process
// (so its CPU counts too), unsigned and signed as the platform runs, and
// signed with the final state written after reading the entry (Finalize,
// as every final state was before FinalizeAt); one at a time and from
// many goroutines (as a cell's concurrent attempts do).
func BenchmarkClaim(b *testing.B) {
	ns := natstest.Start(b)
	answer := &cellpayv1.Transaction{TransactionId: "t", Status: cellpayv1.TransactionStatus_APPROVED, AuthCode: "A1B2C3", MaskedPan: "424242******4242"}
	signing := cellCerts(b, "cell-a")["cell-a"]
	for _, v := range []struct {
		name string
		cert tlsconf.Files
		read bool // the final state written after reading the entry (Finalize), not on top of the claim (FinalizeAt)
	}{
		{"unsigned", tlsconf.Files{}, false},
		{"signed", signing, false},
		{"signed-read", signing, true},
	} {
		d, err := Open(Config{NATSURL: ns.URL(), CellID: "cell-a", SigningCert: v.cert, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(d.Close)
		if !testutil.Within(10*time.Second, d.Ready) {
			b.Fatal("directory not ready")
		}
		var n atomic.Int64
		claim := func(b *testing.B) {
			k := idempotency.Key{PartnerID: "p-001", TransactionID: v.name + "-" + strconv.FormatInt(n.Add(1), 10)}
			e, ours, err := d.Claim(context.Background(), k, owned("cell-a", "c", 1, fpA))
			if err != nil || !ours {
				b.Fatalf("claim: ours=%v err=%v", ours, err)
			}
			fin := func() error { return d.FinalizeAt(context.Background(), k, e.Revision, "cell-a", fpA, "", answer) }
			if v.read {
				fin = func() error { return d.Finalize(context.Background(), k, "cell-a", fpA, "", answer) }
			}
			if err := fin(); err != nil {
				b.Fatalf("finalize: %v", err)
			}
		}
		b.Run(v.name+"/serial", func(b *testing.B) {
			defer cpuPerOp(b)()
			for b.Loop() {
				claim(b)
			}
		})
		b.Run(v.name+"/parallel", func(b *testing.B) {
			defer cpuPerOp(b)()
			b.SetParallelism(16)
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					claim(b)
				}
			})
		})
	}
}

// cpuPerOp reports, when the func it returns is called, the process's CPU
// time (user and system, the NATS server's included) per operation since.
func cpuPerOp(b *testing.B) func() {
	cpu := func() time.Duration {
		var ru syscall.Rusage
		if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
			b.Fatal(err)
		}
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	start := cpu()
	return func() { b.ReportMetric(float64(cpu()-start)/float64(b.N)/1e3, "cpu-µs/op") }
}
