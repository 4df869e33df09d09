package jsconf_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/cellpay/cellpay/internal/dev/testutil/natstest"
	"github.com/cellpay/cellpay/internal/jsconf"
)

func TestValidateNamesTheField(t *testing.T) {
	for _, tc := range []struct {
		l    jsconf.Limits
		want string
	}{
		{jsconf.Limits{Replicas: 0}, "replicas 0"},
		{jsconf.Limits{Replicas: 6}, "replicas 6"},
		{jsconf.Limits{Replicas: 3, MaxAge: -time.Second}, "max age -1s"},
		{jsconf.Limits{Replicas: 3, MaxBytes: -1}, "max bytes -1"},
	} {
		err := tc.l.Validate()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Validate(%+v) = %v; want an error naming %q", tc.l, err, tc.want)
		}
	}
	if err := (jsconf.Limits{Replicas: 3, MaxAge: time.Hour, MaxBytes: 1 << 30}).Validate(); err != nil {
		t.Errorf("valid limits refused: %v", err)
	}
}

func TestDifferences(t *testing.T) {
	l := jsconf.Limits{Replicas: 3, MaxAge: time.Hour}
	if d := l.Differences(jetstream.StreamConfig{Replicas: 3, MaxAge: time.Hour, MaxBytes: -1}); d != nil {
		t.Errorf("no size limit on either side (-1 in NATS, 0 here): differences %v", d)
	}
	got := l.Differences(jetstream.StreamConfig{Replicas: 1, MaxAge: time.Hour, MaxBytes: 100})
	want := []string{"replicas 1, want 3", "max bytes 100, want 0"}
	if !slices.Equal(got, want) {
		t.Errorf("differences %q; want %q", got, want)
	}
}

// TestOpenStreamCreatesOnceAndKeeps: over a real NATS server, the first
// open creates the stream with the limits, the next finds it as it is;
// one changed meanwhile is kept, and its differences returned.
func TestOpenStreamCreatesOnceAndKeeps(t *testing.T) {
	srv := natstest.Start(t)
	nc, err := nats.Connect(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cfg := jetstream.StreamConfig{Name: "S", Subjects: []string{"s.>"}, Storage: jetstream.FileStorage}
	l := jsconf.Limits{Replicas: 1, MaxAge: time.Hour, MaxBytes: 1 << 20}
	st, d, err := jsconf.OpenStream(ctx, js, cfg, l)
	if err != nil || d != nil {
		t.Fatalf("create: %v, differences %v", err, d)
	}
	if c := st.CachedInfo().Config; c.MaxAge != time.Hour || c.MaxBytes != 1<<20 || c.Replicas != 1 {
		t.Fatalf("created with %v, %d bytes, %d replicas", c.MaxAge, c.MaxBytes, c.Replicas)
	}
	if _, d, err := jsconf.OpenStream(ctx, js, cfg, l); err != nil || d != nil {
		t.Fatalf("open again: %v, differences %v", err, d)
	}
	changed := st.CachedInfo().Config
	changed.MaxBytes = 4 << 20
	if _, err := js.UpdateStream(ctx, changed); err != nil {
		t.Fatal(err)
	}
	st, d, err = jsconf.OpenStream(ctx, js, cfg, l)
	if err != nil || !slices.Equal(d, []string{"max bytes 4194304, want 1048576"}) {
		t.Fatalf("open the changed stream: %v, differences %q", err, d)
	}
	if st.CachedInfo().Config.MaxBytes != 4<<20 {
		t.Fatal("the changed stream was rewritten")
	}
	if _, _, err := jsconf.OpenStream(ctx, js, cfg, jsconf.Limits{}); err == nil || !strings.Contains(err.Error(), "stream S: replicas 0") {
		t.Fatalf("zero limits: %v; want an error naming the stream and the field", err)
	}

	var drift jsconf.Drift
	drift.Set("b", nil)
	drift.Set("a", d)
	var seen []string
	drift.Each(func(name string, differs bool) {
		seen = append(seen, name+"="+map[bool]string{true: "1", false: "0"}[differs])
	})
	if !slices.Equal(seen, []string{"a=1", "b=0"}) {
		t.Fatalf("drift %v", seen)
	}
}
