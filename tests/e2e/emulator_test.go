//go:build e2e

package e2e

import (
	"context"
	"testing"

	"github.com/diskplane/diskplane/pkg/emulator/admin"
	"github.com/diskplane/diskplane/pkg/emulator/model"
)

// emulator is a client of the EC2 emulator's admin API: the cloud's view of
// volumes and snapshots (what EC2 really holds, never hidden by a fault),
// and its faults.
type emulator struct {
	client admin.Client
}

// volumes lists every EC2 volume, the instances' root volumes included.
func (e *emulator) volumes(ctx context.Context) ([]model.Volume, error) { return e.client.Volumes(ctx) }

// snapshots lists every EC2 snapshot.
func (e *emulator) snapshots(ctx context.Context) ([]model.Snapshot, error) {
	return e.client.Snapshots(ctx)
}

// resourceIDs lists the IDs of every volume and snapshot.
func (e *emulator) resourceIDs(ctx context.Context) ([]string, error) {
	vols, err := e.volumes(ctx)
	if err != nil {
		return nil, err
	}
	snaps, err := e.snapshots(ctx)
	if err != nil {
		return nil, err
	}
	var ids []string
	for _, v := range vols {
		ids = append(ids, v.ID)
	}
	for _, s := range snaps {
		ids = append(ids, s.ID)
	}
	return ids, nil
}

// volume returns the EC2 volume with this ID, failing the test when the
// emulator does not have it.
func (e *emulator) volume(t *testing.T, id string) model.Volume {
	t.Helper()
	vols, err := e.volumes(t.Context())
	if err != nil {
		t.Fatalf("list the emulator's volumes: %v", err)
	}
	for _, v := range vols {
		if v.ID == id {
			return v
		}
	}
	t.Fatalf("the emulator has no volume %s", id)
	return model.Volume{}
}

// volumesTagged returns the volumes whose tag key has the value.
func (e *emulator) volumesTagged(ctx context.Context, key, value string) ([]model.Volume, error) {
	vols, err := e.volumes(ctx)
	if err != nil {
		return nil, err
	}
	var out []model.Volume
	for _, v := range vols {
		if v.Tags[key] == value {
			out = append(out, v)
		}
	}
	return out, nil
}

// patchFaults changes the fault settings the JSON document names (see
// docs/emulator.md, "Faults") and keeps the others.
func (e *emulator) patchFaults(ctx context.Context, doc string) error {
	return e.client.PatchFaults(ctx, doc)
}

// setHealth sets what DescribeVolumeStatus reports about a volume (a
// model.VolumeHealth document; {} is healthy).
func (e *emulator) setHealth(ctx context.Context, id, doc string) error {
	return e.client.SetVolumeHealth(ctx, id, doc)
}

// failIO makes the volume's device fail every write, or heals it.
func (e *emulator) failIO(ctx context.Context, id string, fail bool) error {
	return e.client.FailVolumeIO(ctx, id, fail)
}
