package controller

import (
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"

	"github.com/diskplane/diskplane/pkg/emulator/emulatortest"
	"github.com/diskplane/diskplane/pkg/emulator/model"
)

// The emulator's root volume of the local instance is 8 GiB of gp3 and counts
// against the gp3 quota, as on EC2; a 1 TiB quota leaves 1016 GiB.
const gp3FreeUnderOneTiB = 1024 - 8

// quotaHarness is a controller over an emulator whose account may hold 1 TiB
// of gp3 and the given number of snapshots.
func quotaHarness(t *testing.T, snapshots int64) *harness {
	t.Helper()
	return newHarness(t, emulatortest.Options{Quotas: model.Quotas{StorageTiB: map[string]int64{"gp3": 1}, Snapshots: snapshots}}, Options{})
}

func gp3Req(name string, sizeGiB int64) *csi.CreateVolumeRequest {
	req := createReq(name, sizeGiB, "")
	req.Parameters["type"] = "gp3"
	return req
}

// TestCreateVolumeOverStorageQuota: EC2's VolumeLimitExceeded reaches the
// provisioner as ResourceExhausted with EC2's explanation, leaves no volume
// behind, and does not spend the request's ClientToken: once the quota is
// raised at run time, the same request creates the volume with the first
// token.
func TestCreateVolumeOverStorageQuota(t *testing.T) {
	h := quotaHarness(t, 0)
	h.createVolume(t, gp3Req("pvc-first", 1000))

	_, err := h.svc.CreateVolume(h.ctx(), gp3Req("pvc-over", 100))
	wantCode(t, err, codes.ResourceExhausted, "maximum gp3 storage limit of 1 TiB")
	if vols := h.volumes(); len(vols) != 1 {
		t.Fatalf("%d volumes after the refused CreateVolume, want only the first: %+v", len(vols), vols)
	}

	if err := h.env.Cloud().PatchQuotas([]byte(`{"storageTiB":{"gp3":2}}`)); err != nil {
		t.Fatal(err)
	}
	vol := h.createVolume(t, gp3Req("pvc-over", 100))
	if got := h.volume(t, vol.VolumeId); got.Size != 100 || got.Type != "gp3" {
		t.Fatalf("volume after raising the quota: %+v", got)
	}
	if n, refused := h.env.Calls("CreateVolume"), h.env.CallsWithCode("CreateVolume", model.CodeVolumeLimitExceeded); n != 3 || refused != 1 {
		t.Fatalf("%d CreateVolume calls, %d refused; want 3 and 1 (first volume, refusal, one retry with the same token)", n, refused)
	}
	if n := h.env.CallsWithCode("CreateVolume", model.CodeIdempotentParameterMismatch); n != 0 {
		t.Fatalf("%d CreateVolume calls met a spent ClientToken", n)
	}
}

// TestExpandVolumeOverStorageQuota: a ModifyVolume over the quota is
// ResourceExhausted and the volume keeps its size, with no modification
// started; within the quota the same expansion works.
func TestExpandVolumeOverStorageQuota(t *testing.T) {
	h := quotaHarness(t, 0)
	vol := h.createVolume(t, gp3Req("pvc-grow", 500))

	_, err := h.expand(vol.VolumeId, (gp3FreeUnderOneTiB+1)*GiB, rwo)
	wantCode(t, err, codes.ResourceExhausted, "maximum gp3 storage limit of 1 TiB")
	if got := h.volume(t, vol.VolumeId); got.Size != 500 {
		t.Fatalf("volume is %d GiB after the refused expansion, want 500", got.Size)
	}
	if _, err := h.env.Cloud().DescribeVolumesModifications(model.Query{IDs: []string{vol.VolumeId}}); err == nil {
		t.Fatal("the refused expansion left a modification")
	}

	resp, err := h.expand(vol.VolumeId, gp3FreeUnderOneTiB*GiB, rwo)
	if err != nil {
		t.Fatalf("expansion up to the quota: %v", err)
	}
	if resp.CapacityBytes != gp3FreeUnderOneTiB*GiB {
		t.Fatalf("capacity %d, want %d GiB", resp.CapacityBytes, gp3FreeUnderOneTiB)
	}
}

// TestCreateSnapshotOverSnapshotQuota: EC2's SnapshotLimitExceeded is
// ResourceExhausted, and the snapshot is taken once the quota allows it.
func TestCreateSnapshotOverSnapshotQuota(t *testing.T) {
	h := quotaHarness(t, 1)
	vol := h.createVolume(t, gp3Req("pvc-snap", 10))
	snap := func(name string) error {
		_, err := h.svc.CreateSnapshot(h.ctx(), &csi.CreateSnapshotRequest{Name: name, SourceVolumeId: vol.VolumeId})
		return err
	}
	if err := snap("snap-1"); err != nil {
		t.Fatal(err)
	}
	wantCode(t, snap("snap-2"), codes.ResourceExhausted, "maximum number of snapshots")
	if n := len(h.env.Cloud().Snapshots()); n != 1 {
		t.Fatalf("%d snapshots after the refusal, want 1", n)
	}
	if err := h.env.Cloud().PatchQuotas([]byte(`{"snapshots":2}`)); err != nil {
		t.Fatal(err)
	}
	if err := snap("snap-2"); err != nil {
		t.Fatalf("CreateSnapshot after raising the quota: %v", err)
	}
}
