package admin_test

import (
	"testing"
	"time"

	"github.com/diskplane/diskplane/pkg/emulator/admin"
	"github.com/diskplane/diskplane/pkg/emulator/emulatortest"
	"github.com/diskplane/diskplane/pkg/emulator/faults"
	"github.com/diskplane/diskplane/pkg/emulator/model"
)

func TestClient(t *testing.T) {
	env := emulatortest.Start(t, emulatortest.Options{})
	c := &admin.Client{URL: env.AdminURL}
	ctx := t.Context()
	if _, err := env.Cloud().CreateVolume(model.CreateVolumeInput{Zone: env.Zone(), Size: 1}); err != nil {
		t.Fatal(err)
	}
	vols, err := c.Volumes(ctx)
	if err != nil || len(vols) != 2 {
		t.Fatalf("Volumes: %d, %v; want the root and one more", len(vols), err)
	}
	if snaps, err := c.Snapshots(ctx); err != nil || len(snaps) != 0 {
		t.Fatalf("Snapshots: %v, %v", snaps, err)
	}
	if a, err := c.Audit(ctx); err != nil || len(a.SharedVolumes) != 0 {
		t.Fatalf("Audit: %+v, %v", a, err)
	}
	if err := c.PatchFaults(ctx, `{"clockSkew": "1m"}`); err != nil {
		t.Fatal(err)
	}
	f, err := c.Faults(ctx)
	if err != nil || time.Duration(f.ClockSkew) != time.Minute {
		t.Fatalf("Faults after the patch: %+v, %v", f, err)
	}
	if err := c.SetFaults(ctx, faults.Config{}); err != nil {
		t.Fatal(err)
	}
	if f, err := c.Faults(ctx); err != nil || f.ClockSkew != 0 {
		t.Fatalf("Faults after the reset: %+v, %v", f, err)
	}
	if err := c.PatchFaults(ctx, `{"errors": [{"action": "*", "code": "Boom", "probability": 1}]}`); err == nil {
		t.Fatal("an invalid fault document was accepted")
	}
}
