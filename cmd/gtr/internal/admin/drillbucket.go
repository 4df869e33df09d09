package admin

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/cellpay/cellpay/internal/jsconf"
	"github.com/cellpay/cellpay/internal/natsauth"
	"github.com/cellpay/cellpay/internal/natsconn"
	"github.com/cellpay/cellpay/internal/tlsconf"
)

// The drills' bucket: its name and bounds. Its size bounds what it keeps
// (a drill's report is a few KiB to 64 KiB: hundreds to thousands of
// drills); once full, a new report is refused (UNAVAILABLE), never an
// old one dropped.
const (
	DrillBucketName     = natsauth.DrillsBucket
	DrillBucketMaxBytes = 32 << 20
)

// drillBucketConfig is the bucket as a GTR that finds none creates it;
// one that exists is kept as it is (package jsconf).
func drillBucketConfig() jetstream.KeyValueConfig {
	return jetstream.KeyValueConfig{
		Bucket:       DrillBucketName,
		Description:  "Cellpay drills: disaster recovery drills' signed reports, by ID (gtrctl drills)",
		History:      1,
		MaxValueSize: maxKeptDrill,
		Storage:      jetstream.FileStorage,
	}
}

// DrillBucket is the DrillStore on NATS: the cellpay_drills bucket,
// opened (created where missing, with Limits) over a connection of its
// own made for each call, as the directory's releases are: recording and
// listing drills are an operator's rare acts, no connection is kept for
// them.
type DrillBucket struct {
	URL  string
	TLS  tlsconf.Files
	Name string // the connection's name
	// Limits are the bucket's where this GTR creates it; MaxBytes zero
	// is DrillBucketMaxBytes.
	Limits jsconf.Limits
	// Drift, if set, records how the bucket found differs from Limits.
	Drift *jsconf.Drift
	// Timeout bounds each call [5s].
	Timeout time.Duration
}

// open connects and opens the bucket; close closes the connection.
func (d *DrillBucket) open(ctx context.Context) (kv jetstream.KeyValue, close func(), err error) {
	nc, err := natsconn.Connect(d.URL, d.Name, d.TLS)
	if err != nil {
		return nil, nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	l := d.Limits
	if l.MaxBytes == 0 {
		l.MaxBytes = DrillBucketMaxBytes
	}
	l.Replicas = max(l.Replicas, 1)
	kv, differs, err := jsconf.OpenKeyValue(ctx, js, drillBucketConfig(), l)
	if err != nil {
		nc.Close()
		return nil, nil, fmt.Errorf("bucket %s: %w", DrillBucketName, err)
	}
	if d.Drift != nil {
		d.Drift.Set(DrillBucketName, differs)
	}
	return kv, nc.Close, nil
}

func (d *DrillBucket) timeout(ctx context.Context) (context.Context, context.CancelFunc) {
	t := d.Timeout
	if t <= 0 {
		t = 5 * time.Second
	}
	return context.WithTimeout(ctx, t)
}

// Create keeps value under key unless key holds one already.
func (d *DrillBucket) Create(ctx context.Context, key string, value []byte) (bool, error) {
	ctx, cancel := d.timeout(ctx)
	defer cancel()
	kv, closeConn, err := d.open(ctx)
	if err != nil {
		return false, err
	}
	defer closeConn()
	_, err = kv.Create(ctx, key, value)
	if errors.Is(err, jetstream.ErrKeyExists) {
		return false, nil
	}
	return err == nil, err
}

// Get is key's value, or ErrNoDrill.
func (d *DrillBucket) Get(ctx context.Context, key string) ([]byte, error) {
	ctx, cancel := d.timeout(ctx)
	defer cancel()
	kv, closeConn, err := d.open(ctx)
	if err != nil {
		return nil, err
	}
	defer closeConn()
	e, err := kv.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, ErrNoDrill
	} else if err != nil {
		return nil, err
	}
	return e.Value(), nil
}

// All is every value kept, at most MaxDrillsRead.
func (d *DrillBucket) All(ctx context.Context) ([][]byte, error) {
	ctx, cancel := d.timeout(ctx)
	defer cancel()
	kv, closeConn, err := d.open(ctx)
	if err != nil {
		return nil, err
	}
	defer closeConn()
	keys, err := kv.ListKeys(ctx)
	if err != nil {
		return nil, err
	}
	defer keys.Stop()
	var out [][]byte
	for k := range keys.Keys() {
		if len(out) == MaxDrillsRead {
			break
		}
		e, err := kv.Get(ctx, k)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue // deleted meanwhile
		} else if err != nil {
			return nil, err
		}
		out = append(out, e.Value())
	}
	return out, ctx.Err()
}
