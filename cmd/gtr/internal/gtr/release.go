package gtr

import (
	"cmp"
	"context"
	"crypto/x509"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/cellpay/cellpay/cmd/gtr/internal/admin"
	"github.com/cellpay/cellpay/internal/jsconf"
	"github.com/cellpay/cellpay/internal/natsauth"
	"github.com/cellpay/cellpay/internal/natsconn"
	"github.com/cellpay/cellpay/internal/tlsconf"
)

// releaser writes the transaction directory's release records over a NATS
// connection of its own, made for each release (an operator's rare act:
// no connection kept for it).
type releaser struct {
	url  string
	tls  tlsconf.Files
	name string
}

// Release puts record under cell's release key in the directory's bucket,
// which the cells create: a platform with no cell yet has none to release.
func (r releaser) Release(ctx context.Context, cell string, record []byte) (uint64, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	nc, err := natsconn.Connect(r.url, r.name, r.tls)
	if err != nil {
		return 0, err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return 0, err
	}
	kv, err := js.KeyValue(ctx, natsauth.DirectoryBucket)
	if err != nil {
		return 0, fmt.Errorf("bucket %s: %w", natsauth.DirectoryBucket, err)
	}
	return kv.Put(ctx, natsauth.DirectoryReleaseKey(cell), record)
}

// drillStore is where the Admin API keeps the drills' signed reports, the
// cellpay_drills bucket, and the CA they are verified against: the one
// the cells' certificates chain to (the platform's), else NATS's. None
// without NATS or a CA: the drills' RPCs then answer UNAVAILABLE.
func drillStore(cfg Config, drift *jsconf.Drift) (admin.DrillStore, *x509.CertPool, error) {
	ca := cmp.Or(cfg.CellTLS.CA, cfg.NATSTLS.CA)
	if cfg.NATSURL == "" || ca == "" {
		return nil, nil, nil
	}
	roots, err := tlsconf.CertPool(ca)
	if err != nil {
		return nil, nil, fmt.Errorf("gtr: the drills' CA: %w", err)
	}
	return &admin.DrillBucket{URL: cfg.NATSURL, TLS: cfg.NATSTLS, Name: "gtr drills " + cfg.ReplicaID,
		Limits: jsconf.Limits{Replicas: cfg.NATSReplicas}, Drift: drift}, roots, nil
}
