package controller

import (
	"fmt"
	"slices"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"

	"github.com/diskplane/diskplane/pkg/emulator/emulatortest"
)

// listAllVolumes pages through ListVolumes with maxEntries per page.
func (h *harness) listAllVolumes(t *testing.T, maxEntries int32) []*csi.ListVolumesResponse_Entry {
	t.Helper()
	var all []*csi.ListVolumesResponse_Entry
	token := ""
	for page := 0; ; page++ {
		if page > 100 {
			t.Fatal("ListVolumes never ends")
		}
		resp, err := h.svc.ListVolumes(h.ctx(), &csi.ListVolumesRequest{MaxEntries: maxEntries, StartingToken: token})
		if err != nil {
			t.Fatalf("ListVolumes page %d: %v", page, err)
		}
		if maxEntries > 0 && len(resp.GetEntries()) > int(maxEntries) {
			t.Fatalf("page of %d entries, max %d", len(resp.GetEntries()), maxEntries)
		}
		all = append(all, resp.GetEntries()...)
		if token = resp.GetNextToken(); token == "" {
			return all
		}
	}
}

func entryIDs(entries []*csi.ListVolumesResponse_Entry) []string {
	ids := make([]string, 0, len(entries))
	for _, e := range entries {
		ids = append(ids, e.GetVolume().GetVolumeId())
	}
	slices.Sort(ids)
	return ids
}

func TestListVolumes(t *testing.T) {
	h := newHarness(t, emulatortest.Options{}, Options{})
	node := h.env.LocalInstance().ID
	var want []string
	for i := range 7 {
		want = append(want, h.createVolume(t, createReq(fmt.Sprintf("pvc-list-%d", i), 1, h.env.Zone())).VolumeId)
	}
	slices.Sort(want)
	if _, err := h.publish(want[3], node, rwo); err != nil {
		t.Fatal(err)
	}

	for _, maxEntries := range []int32{0, 1, 2, 5, 6, 7, 1000} {
		t.Run(fmt.Sprintf("max %d", maxEntries), func(t *testing.T) {
			entries := h.listAllVolumes(t, maxEntries)
			if got := entryIDs(entries); !slices.Equal(got, want) {
				t.Fatalf("listed %v, want %v (every volume once, no root volumes)", got, want)
			}
			for _, e := range entries {
				wantNodes := []string(nil)
				if e.GetVolume().GetVolumeId() == want[3] {
					wantNodes = []string{node}
				}
				if got := e.GetStatus().GetPublishedNodeIds(); !slices.Equal(got, wantNodes) {
					t.Fatalf("%s published on %v, want %v", e.GetVolume().GetVolumeId(), got, wantNodes)
				}
				if e.GetVolume().GetCapacityBytes() != GiB || len(e.GetVolume().GetAccessibleTopology()) != 1 {
					t.Fatalf("entry %v lacks size or topology", e.GetVolume())
				}
			}
		})
	}

	t.Run("a deleted volume is gone at once", func(t *testing.T) {
		if _, err := h.svc.DeleteVolume(h.ctx(), &csi.DeleteVolumeRequest{VolumeId: want[0]}); err != nil {
			t.Fatal(err)
		}
		if got := entryIDs(h.listAllVolumes(t, 0)); !slices.Equal(got, want[1:]) {
			t.Fatalf("listed %v, want %v", got, want[1:])
		}
	})
	t.Run("bad starting token", func(t *testing.T) {
		for _, tok := range []string{"invalid-token", pageToken{cloudToken: "not-an-ec2-token", pageSize: 5}.encode()} {
			_, err := h.svc.ListVolumes(h.ctx(), &csi.ListVolumesRequest{StartingToken: tok})
			wantCode(t, err, codes.Aborted, "")
		}
	})
	t.Run("negative max entries", func(t *testing.T) {
		_, err := h.svc.ListVolumes(h.ctx(), &csi.ListVolumesRequest{MaxEntries: -1})
		wantCode(t, err, codes.InvalidArgument, "")
	})
}

func TestControllerGetVolume(t *testing.T) {
	h := newHarness(t, emulatortest.Options{}, Options{})
	node := h.env.LocalInstance().ID
	vol := h.createVolume(t, createReq("pvc-get", 3, h.env.Zone()))

	get := func() *csi.ControllerGetVolumeResponse {
		t.Helper()
		resp, err := h.svc.ControllerGetVolume(h.ctx(), &csi.ControllerGetVolumeRequest{VolumeId: vol.VolumeId})
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	if resp := get(); resp.GetVolume().GetCapacityBytes() != 3*GiB || resp.GetStatus() == nil || len(resp.GetStatus().GetPublishedNodeIds()) != 0 {
		t.Fatalf("unattached volume: %v", resp)
	}
	if _, err := h.publish(vol.VolumeId, node, rwo); err != nil {
		t.Fatal(err)
	}
	if got := get().GetStatus().GetPublishedNodeIds(); !slices.Equal(got, []string{node}) {
		t.Fatalf("published on %v, want %s", got, node)
	}

	_, err := h.svc.ControllerGetVolume(h.ctx(), &csi.ControllerGetVolumeRequest{VolumeId: "vol-0123456789abcdef0"})
	wantCode(t, err, codes.NotFound, "")
	_, err = h.svc.ControllerGetVolume(h.ctx(), &csi.ControllerGetVolumeRequest{})
	wantCode(t, err, codes.InvalidArgument, "")
}

// TestListVolumesIncludesStaticVolumes: a volume made outside the driver
// (a static PersistentVolume, or one migrated from the in-tree plugin)
// carries no cluster tag. The external-attacher attaches again every
// attached volume ListVolumes does not show, at every resync, so it must be
// listed with its node.
func TestListVolumesIncludesStaticVolumes(t *testing.T) {
	h := newHarness(t, emulatortest.Options{}, Options{})
	node := h.env.LocalInstance().ID
	out, err := h.env.EC2Client().CreateVolume(h.ctx(), &ec2.CreateVolumeInput{AvailabilityZone: aws.String(h.env.Zone()), Size: aws.Int32(1)})
	if err != nil {
		t.Fatal(err)
	}
	static := aws.ToString(out.VolumeId)
	if _, err := h.publish(static, node, rwo); err != nil {
		t.Fatal(err)
	}
	for _, e := range h.listAllVolumes(t, 0) {
		if e.GetVolume().GetVolumeId() == static {
			if got := e.GetStatus().GetPublishedNodeIds(); !slices.Equal(got, []string{node}) {
				t.Fatalf("static volume %s published on %v, want %s", static, got, node)
			}
			return
		}
	}
	t.Fatalf("ListVolumes leaves out the attached static volume %s", static)
}
