package controller

import (
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/diskplane/diskplane/pkg/emulator/emulatortest"
	"github.com/diskplane/diskplane/pkg/emulator/model"
)

func (h *harness) expand(volumeID string, bytes int64, c *csi.VolumeCapability) (*csi.ControllerExpandVolumeResponse, error) {
	return h.svc.ControllerExpandVolume(h.ctx(), &csi.ControllerExpandVolumeRequest{
		VolumeId: volumeID, CapacityRange: &csi.CapacityRange{RequiredBytes: bytes}, VolumeCapability: c})
}

func (h *harness) modify(volumeID string, params map[string]string) error {
	_, err := h.svc.ControllerModifyVolume(h.ctx(), &csi.ControllerModifyVolumeRequest{VolumeId: volumeID, MutableParameters: params})
	return err
}

func TestControllerExpandVolume(t *testing.T) {
	h := newHarness(t, emulatortest.Options{}, Options{})
	vol := h.createVolume(t, createReq("pvc-grow", 10, ""))

	resp, err := h.expand(vol.VolumeId, 20*GiB-5, rwo)
	if err != nil {
		t.Fatal(err)
	}
	if resp.GetCapacityBytes() != 20*GiB || !resp.GetNodeExpansionRequired() {
		t.Fatalf("expand = %v, want 20 GiB with node expansion", resp)
	}
	if got := h.volume(t, vol.VolumeId).Size; got != 20 {
		t.Fatalf("emulated volume is %d GiB, want 20", got)
	}
	// Asking for what the volume already has, or less, changes nothing.
	for _, size := range []int64{20 * GiB, 15 * GiB} {
		resp, err := h.expand(vol.VolumeId, size, nil)
		if err != nil || resp.GetCapacityBytes() != 20*GiB || !resp.GetNodeExpansionRequired() {
			t.Fatalf("expand to %d = %v, %v; want 20 GiB", size, resp, err)
		}
	}
	if n := h.env.Calls("ModifyVolume"); n != 1 {
		t.Fatalf("%d ModifyVolume calls, want 1", n)
	}
	blockVol := h.createVolume(t, createReq("pvc-grow-block", 1, ""))
	resp, err = h.expand(blockVol.VolumeId, 2*GiB, blockCap(csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER))
	if err != nil || resp.GetNodeExpansionRequired() {
		t.Fatalf("block expand = %v, %v; want no node expansion", resp, err)
	}

	tests := []struct {
		name string
		req  *csi.ControllerExpandVolumeRequest
		code codes.Code
	}{
		{name: "no volume ID", req: &csi.ControllerExpandVolumeRequest{CapacityRange: &csi.CapacityRange{RequiredBytes: GiB}}, code: codes.InvalidArgument},
		{name: "no capacity range", req: &csi.ControllerExpandVolumeRequest{VolumeId: vol.VolumeId}, code: codes.InvalidArgument},
		{name: "required above limit", req: &csi.ControllerExpandVolumeRequest{VolumeId: vol.VolumeId, CapacityRange: &csi.CapacityRange{RequiredBytes: 30 * GiB, LimitBytes: 25 * GiB}}, code: codes.InvalidArgument},
		{name: "no whole GiB in range", req: &csi.ControllerExpandVolumeRequest{VolumeId: vol.VolumeId, CapacityRange: &csi.CapacityRange{RequiredBytes: 30*GiB + 1, LimitBytes: 30*GiB + 2}}, code: codes.OutOfRange},
		{name: "above the type maximum", req: &csi.ControllerExpandVolumeRequest{VolumeId: vol.VolumeId, CapacityRange: &csi.CapacityRange{RequiredBytes: 70000 * GiB}}, code: codes.OutOfRange},
		{name: "bad capability", req: &csi.ControllerExpandVolumeRequest{VolumeId: vol.VolumeId, CapacityRange: &csi.CapacityRange{RequiredBytes: 30 * GiB},
			VolumeCapability: mountCap(csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER, "")}, code: codes.InvalidArgument},
		{name: "no such volume", req: &csi.ControllerExpandVolumeRequest{VolumeId: "vol-0123456789abcdef0", CapacityRange: &csi.CapacityRange{RequiredBytes: GiB}}, code: codes.NotFound},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := h.svc.ControllerExpandVolume(h.ctx(), tc.req)
			wantCode(t, err, tc.code, "")
		})
	}
	if n := h.env.Calls("ModifyVolume"); n != 2 {
		t.Fatalf("%d ModifyVolume calls, want 2 (the failed requests must change nothing)", n)
	}
}

func TestControllerModifyVolume(t *testing.T) {
	h := newHarness(t, emulatortest.Options{}, Options{})
	vol := h.createVolume(t, withParams(createReq("pvc-mod", 10, ""), map[string]string{"tagSpecification_1": "tier=bronze", "tagSpecification_2": "old=1"}))

	if err := h.modify(vol.VolumeId, map[string]string{"iops": "4000", "throughput": "200"}); err != nil {
		t.Fatal(err)
	}
	if v := h.volume(t, vol.VolumeId); v.Iops != 4000 || v.Throughput != 200 {
		t.Fatalf("volume %+v, want 4000 IOPS and 200 MiB/s", v)
	}
	if n := h.env.Calls("ModifyVolume"); n != 1 {
		t.Fatalf("%d ModifyVolume calls, want 1", n)
	}

	// Tags only: never a ModifyVolume.
	err := h.modify(vol.VolumeId, map[string]string{
		"tagSpecification_1": "tier={{ .PVCName }}", "tagDeletion_1": "old",
		"csi.storage.k8s.io/pvc/name": "gold", "csi.storage.k8s.io/pvc/namespace": "shop", "csi.storage.k8s.io/pv/name": "pvc-mod"})
	if err != nil {
		t.Fatal(err)
	}
	tags := h.volume(t, vol.VolumeId).Tags
	if _, ok := tags["old"]; ok || tags["tier"] != "gold" {
		t.Fatalf("tags %v, want tier=gold and no old", tags)
	}
	// The same class again, or none at all, changes nothing.
	if err := h.modify(vol.VolumeId, map[string]string{"iops": "4000", "throughput": "200"}); err != nil {
		t.Fatal(err)
	}
	if err := h.modify(vol.VolumeId, nil); err != nil {
		t.Fatalf("modify without parameters: %v", err)
	}
	if n := h.env.Calls("ModifyVolume"); n != 1 {
		t.Fatalf("%d ModifyVolume calls after a tag-only change and a repeat, want 1", n)
	}

	gp2 := h.createVolume(t, withParams(createReq("pvc-gp2", 10, ""), map[string]string{"type": "gp2"}))
	tests := []struct {
		name   string
		volume string
		params map[string]string
		code   codes.Code
		msg    string
	}{
		{name: "unknown key", volume: vol.VolumeId, params: map[string]string{"XXX_FakeKey": "XXX_FakeValue"}, code: codes.InvalidArgument, msg: "XXX_FakeKey"},
		{name: "no parameters, no such volume", volume: "non-existing-volume-id", params: nil, code: codes.NotFound},
		{name: "iops for the volume's type", volume: gp2.VolumeId, params: map[string]string{"iops": "4000"}, code: codes.InvalidArgument, msg: "gp2 has no provisioned IOPS"},
		{name: "throughput for the new type", volume: vol.VolumeId, params: map[string]string{"type": "io2", "throughput": "300"}, code: codes.InvalidArgument},
		{name: "reserved tag", volume: vol.VolumeId, params: map[string]string{"tagDeletion_1": "CSIVolumeName"}, code: codes.InvalidArgument},
		{name: "no such volume", volume: "vol-0123456789abcdef0", params: map[string]string{"iops": "4000"}, code: codes.NotFound},
		{name: "no volume ID", volume: "", params: map[string]string{"iops": "4000"}, code: codes.InvalidArgument},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			wantCode(t, h.modify(tc.volume, tc.params), tc.code, tc.msg)
		})
	}
	if n := h.env.Calls("ModifyVolume"); n != 1 {
		t.Fatalf("%d ModifyVolume calls, want 1: refused classes must change nothing", n)
	}
}

// TestExpandAndModifyCoalesce sends a PVC's new size and its new
// VolumeAttributesClass together, as the resizer does, and checks that EC2
// sees one ModifyVolume carrying both.
func TestExpandAndModifyCoalesce(t *testing.T) {
	h := newHarness(t, emulatortest.Options{}, Options{ModifyCoalesceWindow: 2 * time.Second})
	vol := h.createVolume(t, createReq("pvc-both", 10, ""))

	var wg sync.WaitGroup
	var expandResp *csi.ControllerExpandVolumeResponse
	var expandErr, modifyErr error
	wg.Go(func() { expandResp, expandErr = h.expand(vol.VolumeId, 30*GiB, rwo) })
	wg.Go(func() {
		modifyErr = h.modify(vol.VolumeId, map[string]string{"iops": "6000", "throughput": "500", "tagSpecification_1": "tier=gold"})
	})
	wg.Wait()
	if expandErr != nil || modifyErr != nil {
		t.Fatalf("expand: %v; modify: %v", expandErr, modifyErr)
	}
	if expandResp.GetCapacityBytes() != 30*GiB {
		t.Fatalf("expand answered %d bytes, want 30 GiB", expandResp.GetCapacityBytes())
	}
	v := h.volume(t, vol.VolumeId)
	if v.Size != 30 || v.Iops != 6000 || v.Throughput != 500 || v.Tags["tier"] != "gold" {
		t.Fatalf("volume %+v, want 30 GiB, 6000 IOPS, 500 MiB/s, tier=gold", v)
	}
	if n := h.env.Calls("ModifyVolume"); n != 1 {
		t.Fatalf("%d EC2 ModifyVolume calls, want 1 for both requests", n)
	}
}

// TestConflictingModificationsFailOnlyOne sends two classes with
// different IOPS for one volume at once: one wins, the other alone is
// Aborted, and EC2 sees one ModifyVolume.
func TestConflictingModificationsFailOnlyOne(t *testing.T) {
	h := newHarness(t, emulatortest.Options{}, Options{ModifyCoalesceWindow: 2 * time.Second})
	vol := h.createVolume(t, createReq("pvc-race", 10, ""))

	iops := []string{"4000", "5000"}
	errs := make([]error, len(iops))
	var wg sync.WaitGroup
	for i, v := range iops {
		wg.Go(func() { errs[i] = h.modify(vol.VolumeId, map[string]string{"iops": v}) })
	}
	wg.Wait()
	var won []string
	for i, err := range errs {
		switch status.Code(err) {
		case codes.OK:
			won = append(won, iops[i])
		case codes.Aborted:
		default:
			t.Fatalf("modify to %s IOPS: %v, want success or Aborted", iops[i], err)
		}
	}
	if len(won) != 1 {
		t.Fatalf("%d requests succeeded (%v), want exactly one", len(won), errs)
	}
	if got := h.volume(t, vol.VolumeId).Iops; got != map[string]int32{"4000": 4000, "5000": 5000}[won[0]] {
		t.Fatalf("volume has %d IOPS, want the winner's %s", got, won[0])
	}
	if n := h.env.Calls("ModifyVolume"); n != 1 {
		t.Fatalf("%d ModifyVolume calls, want 1", n)
	}
}

// TestInvalidModifyDoesNotFailTheMergedResize: an expand and a modify
// arrive together; the modify asks for IOPS EC2 refuses for the volume's
// size. The resize must still happen; only the modify fails.
func TestInvalidModifyDoesNotFailTheMergedResize(t *testing.T) {
	h := newHarness(t, emulatortest.Options{}, Options{ModifyCoalesceWindow: 2 * time.Second})
	vol := h.createVolume(t, createReq("pvc-mixed", 2, ""))

	var wg sync.WaitGroup
	var expandResp *csi.ControllerExpandVolumeResponse
	var expandErr, modifyErr error
	wg.Go(func() { expandResp, expandErr = h.expand(vol.VolumeId, 3*GiB, rwo) })
	wg.Go(func() { modifyErr = h.modify(vol.VolumeId, map[string]string{"iops": "16000"}) }) // above 500 IOPS per GiB
	wg.Wait()
	if expandErr != nil || expandResp.GetCapacityBytes() != 3*GiB {
		t.Fatalf("expand: %v, %v; want 3 GiB", expandResp, expandErr)
	}
	wantCode(t, modifyErr, codes.InvalidArgument, "")
	if v := h.volume(t, vol.VolumeId); v.Size != 3 || v.Iops != 3000 {
		t.Fatalf("volume %+v, want 3 GiB at the default 3000 IOPS", v)
	}
}

// TestExpandBelowModificationUnderWay: a modification to 4 GiB is still
// running when an expand to 3 GiB arrives (a resize retried after a larger
// one began); the volume is becoming large enough, so it is success.
func TestExpandBelowModificationUnderWay(t *testing.T) {
	h := newHarness(t, emulatortest.Options{Latencies: model.Latencies{Modify: 500 * time.Millisecond}}, Options{ModifyCoalesceWindow: 10 * time.Millisecond})
	vol := h.createVolume(t, createReq("pvc-grow", 2, ""))
	if _, err := h.env.EC2Client().ModifyVolume(h.ctx(), &ec2.ModifyVolumeInput{VolumeId: aws.String(vol.VolumeId), Size: aws.Int32(4)}); err != nil {
		t.Fatal(err)
	}
	resp, err := h.expand(vol.VolumeId, 3*GiB, rwo)
	if err != nil {
		t.Fatalf("expand to 3 GiB while the volume grows to 4: %v", err)
	}
	if resp.GetCapacityBytes() != 4*GiB {
		t.Fatalf("expand answered %d bytes, want 4 GiB", resp.GetCapacityBytes())
	}
	if n := h.env.Calls("ModifyVolume"); n != 1 {
		t.Fatalf("%d ModifyVolume calls, want only the first", n)
	}
}
