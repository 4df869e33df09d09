package admin

import (
	"reflect"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/cellpay/cellpay/internal/dev/testutil"
	"github.com/cellpay/cellpay/pkg/adminproto"
)

// TestGetApplyWhileRampingBack: with cell-b ramping back on this
// replica after an ejection (health share 10, effective weight 10) and
// cell-c drained and ramping back by the operator, GetTable then
// ApplyTable of exactly what it returned (version raised), over real gRPC,
// changes no configured weight: this replica's momentary health never
// becomes the shared configuration.
func TestGetApplyWhileRampingBack(t *testing.T) {
	f := start(t, token)
	c := client(t, f.addr, token)
	ctx := ctxFor(t)
	if _, err := c.Drain(ctx, &adminproto.DrainRequest{CellId: "cell-c", Percent: 40}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Restore(ctx, &adminproto.RestoreRequest{CellId: "cell-c", Over: durationpb.New(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	f.eject(t, "cell-b")
	f.clock.Add(2 * time.Second) // past the first back-off: the next check re-admits it
	testutil.Eventually(t, 5*time.Second, "cell-b re-admitted on 10%", func() bool { return f.mon.Share("cell-b") == 10 })
	var eff *adminproto.EffectiveTable
	testutil.Eventually(t, 5*time.Second, "the effective table routes cell-b at weight 10", func() bool {
		var err error
		eff, err = c.GetEffectiveTable(ctx, &adminproto.GetEffectiveTableRequest{})
		return err == nil && eff.Cells[1].EffectiveWeight == 10
	})
	if b := eff.Cells[1]; b.Id != "cell-b" || b.ConfiguredWeight != 100 || b.RampWeight != 100 || b.HealthShare != 10 || b.State != "up" || eff.ReplicaId != "test" {
		t.Fatalf("effective cell-b: %v", b)
	}
	if cc := eff.Cells[2]; cc.ConfiguredWeight != 100 || cc.RampWeight < 60 || cc.RampWeight >= 100 {
		t.Fatalf("effective cell-c: %v", cc)
	}
	docBefore, _, _ := f.st.Doc()

	got, err := c.GetTable(ctx, &adminproto.GetTableRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, cell := range got.Cells {
		if cell.Weight != 100 {
			t.Fatalf("GetTable shows %s at weight %d, not its configured 100: %v", cell.Id, cell.Weight, got)
		}
	}
	got.Version++
	if res, err := c.ApplyTable(ctx, &adminproto.ApplyTableRequest{Table: got}); err != nil || !res.Applied {
		t.Fatalf("apply: %v, %v", res, err)
	}
	docAfter, _, _ := f.st.Doc()
	docBefore.Version = got.Version
	// Every configured weight stays: table weights, targets, cell-c's ramp.
	if !reflect.DeepEqual(docAfter, docBefore) || docAfter.Cell("cell-c").Ramp == nil {
		t.Fatalf("re-applying the table changed the configuration:\nbefore %+v\nafter  %+v", docBefore, docAfter)
	}
	again, _ := c.GetTable(ctx, &adminproto.GetTableRequest{})
	if !proto.Equal(again, got) {
		t.Fatalf("GetTable after the apply %v, want %v", again, got)
	}
}
