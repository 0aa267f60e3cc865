package cloud

import (
	"errors"
	"testing"
	"time"

	"github.com/diskplane/diskplane/pkg/emulator/emulatortest"
	"github.com/diskplane/diskplane/pkg/emulator/model"
)

// TestVolumeStatuses reads the status of many volumes at once: one
// DescribeVolumeStatus call per 500 volumes, EC2's checks, events, actions
// and initialization in the driver's terms, and a volume EC2 does not know
// (deleted meanwhile) simply missing, the batch split around it.
func TestVolumeStatuses(t *testing.T) {
	t.Parallel()
	emulatorOnly(t, "cannot make a volume impaired or give it events (its DescribeVolumeStatus answers ok for every volume)")
	env := emulatortest.Start(t, emulatortest.Options{})
	ids := createMany(t, env, 120)
	since := time.Date(2026, 11, 20, 8, 0, 0, 0, time.UTC)
	ended := since.Add(time.Hour)
	sick := model.VolumeHealth{
		Status: model.StatusImpaired, IOEnabled: model.CheckFailed, IOPerformance: model.PerformanceDegraded,
		Events: []model.VolumeEvent{
			{ID: "evol-1", Type: "potential-data-inconsistency", Description: "Awaiting Action: Enable IO", NotBefore: since},
			{ID: "evol-0", Type: "io-enabled", Description: "IO Enabled", NotBefore: since.Add(-2 * time.Hour), NotAfter: ended},
		},
		Actions:        []model.VolumeAction{{Code: "enable-volume-io", Description: "Enable volume I/O", EventID: "evol-1", EventType: "potential-data-inconsistency"}},
		Initialization: &model.VolumeInitialization{Type: "default", Progress: 35, EstimatedSeconds: 600},
	}
	if err := env.Cloud().SetVolumeHealth(ids[7], sick); err != nil {
		t.Fatal(err)
	}
	c := newCloud(t, env, testConfig())
	before := env.Calls(opDescribeVolumeStatus)
	got, err := c.VolumeStatuses(testContext(t), ids)
	if err != nil {
		t.Fatal(err)
	}
	if n := env.Calls(opDescribeVolumeStatus) - before; n != 1 {
		t.Errorf("%d DescribeVolumeStatus calls for %d volumes, want 1", n, len(ids))
	}
	if len(got) != len(ids) {
		t.Fatalf("statuses of %d volumes, want %d", len(got), len(ids))
	}
	s := got[ids[7]]
	if s.VolumeID != ids[7] || s.Status != VolumeStatusImpaired || s.IOEnabled != CheckFailed || s.IOPerformance != "degraded" {
		t.Errorf("impaired volume: %+v", s)
	}
	if len(s.Events) != 2 || s.Events[0].Type != "potential-data-inconsistency" || !s.Events[0].NotBefore.Equal(since) ||
		!s.Events[0].NotAfter.IsZero() || !s.Events[1].NotAfter.Equal(ended) || s.Events[0].Description != "Awaiting Action: Enable IO" {
		t.Errorf("events %+v", s.Events)
	}
	if len(s.Actions) != 1 || s.Actions[0] != (VolumeAction{Code: "enable-volume-io", Description: "Enable volume I/O", EventID: "evol-1", EventType: "potential-data-inconsistency"}) {
		t.Errorf("actions %+v", s.Actions)
	}
	if in := s.Initialization; in == nil || *in != (VolumeInitialization{Type: "default", Progress: 35, EstimatedSeconds: 600}) {
		t.Errorf("initialization %+v", s.Initialization)
	}
	if w := got[ids[0]]; w.Status != VolumeStatusOK || w.IOEnabled != "passed" || len(w.Events) != 0 || w.Initialization != nil {
		t.Errorf("healthy volume: %+v", w)
	}

	// A volume deleted meanwhile fails EC2's whole call; the batch is split
	// and only that volume is missing.
	if err := c.DeleteVolume(testContext(t), ids[3]); err != nil {
		t.Fatal(err)
	}
	if _, err := c.GetVolume(testContext(t), ids[3]); !errors.Is(err, ErrNotFound) {
		t.Fatalf("deleted volume %s still described: %v", ids[3], err)
	}
	got, err = c.VolumeStatuses(testContext(t), ids[:10])
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := got[ids[3]]; ok || len(got) != 9 {
		t.Errorf("after deleting %s: %d statuses, that one included: %v", ids[3], len(got), ok)
	}
}

// TestVolumeStatusesFailure checks that an EC2 failure of the whole call
// reaches the caller classified, not as a volume that is missing.
func TestVolumeStatusesFailure(t *testing.T) {
	t.Parallel()
	emulatorOnly(t, motoLacksFaults)
	env := emulatortest.Start(t, emulatortest.Options{})
	ids := createMany(t, env, 3)
	if err := env.Faults().Patch([]byte(`{"unauthorized":["DescribeVolumeStatus"]}`)); err != nil {
		t.Fatal(err)
	}
	c := newCloud(t, env, testConfig())
	if _, err := c.VolumeStatuses(testContext(t), ids); !errors.Is(err, ErrPermissionDenied) {
		t.Fatalf("VolumeStatuses with DescribeVolumeStatus refused = %v, want ErrPermissionDenied", err)
	}
}
