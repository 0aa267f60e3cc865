package admin_test

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/diskplane/diskplane/pkg/emulator/admin"
	"github.com/diskplane/diskplane/pkg/emulator/emulatortest"
	"github.com/diskplane/diskplane/pkg/emulator/faults"
	"github.com/diskplane/diskplane/pkg/emulator/iam"
	"github.com/diskplane/diskplane/pkg/emulator/kms"
	"github.com/diskplane/diskplane/pkg/emulator/model"
)

func TestClient(t *testing.T) {
	env := emulatortest.Start(t, emulatortest.Options{})
	c := &admin.Client{URL: env.AdminURL}
	ctx := t.Context()
	vol, err := env.Cloud().CreateVolume(model.CreateVolumeInput{Zone: env.Zone(), Size: 1})
	if err != nil {
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
	ds, err := c.Transitions(ctx)
	if err != nil || !slices.ContainsFunc(ds, func(d model.Draw) bool { return d.Resource == vol.ID && d.Change == "create" }) {
		t.Fatalf("Transitions: %+v, %v; want the create of %s", ds, err, vol.ID)
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
	if err := c.SetVolumeHealth(ctx, vol.ID, `{"status": "impaired", "ioEnabled": "failed"}`); err != nil {
		t.Fatal(err)
	}
	if vols, err := c.Volumes(ctx); err != nil || healthOf(vols, vol.ID).Status != "impaired" {
		t.Fatalf("after SetVolumeHealth: %+v, %v", healthOf(vols, vol.ID), err)
	}
	if err := c.SetVolumeHealth(ctx, vol.ID, `{"status": "on fire"}`); err == nil {
		t.Fatal("a status EC2 never reports was accepted")
	}
	if err := c.FailVolumeIO(ctx, vol.ID, true); err == nil {
		t.Fatal("FailVolumeIO of a volume with no device here succeeded")
	}
	role := iam.Role{Name: "app", TrustPolicy: &iam.Policy{Statement: []iam.Statement{{Effect: "Allow",
		Principal: &iam.Principal{AWS: iam.StringList{"*"}}, Action: iam.StringList{"sts:AssumeRoleWithWebIdentity"}}}}}
	if err := c.SetIAM(ctx, iam.Config{Roles: []iam.Role{role}}); err != nil {
		t.Fatal(err)
	}
	if got := env.IAM().Config().Roles; len(got) != 1 || got[0].Name != "app" {
		t.Fatalf("roles after SetIAM: %+v", got)
	}
	if err := c.SetIAM(ctx, map[string]any{"roles": "not a list"}); err == nil {
		t.Fatal("an invalid IAM document was accepted")
	}
	if err := c.SetKMSKey(ctx, "k1", kms.KeySpec{Aliases: []string{"alias/k1"}}); err != nil {
		t.Fatal(err)
	}
	if err := c.SetKMSKey(ctx, "k1", map[string]any{"enabled": false}); err != nil {
		t.Fatal(err)
	}
	if err := env.Keys().Usable("k1"); !errors.Is(err, kms.ErrKeyDisabled) {
		t.Fatalf("the key disabled through SetKMSKey: %v, want ErrKeyDisabled", err)
	}
}

// healthOf finds one volume's health in a list.
func healthOf(vols []model.Volume, id string) model.VolumeHealth {
	for _, v := range vols {
		if v.ID == id {
			return v.Health
		}
	}
	return model.VolumeHealth{}
}
