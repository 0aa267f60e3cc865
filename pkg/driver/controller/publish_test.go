package controller

import (
	"fmt"
	"slices"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"

	"github.com/diskplane/diskplane/pkg/driver/volumecontext"
	"github.com/diskplane/diskplane/pkg/emulator/emulatortest"
	"github.com/diskplane/diskplane/pkg/emulator/model"
)

// twoNodes is an emulated cloud with two instances in us-east-1a.
func twoNodes() emulatortest.Options {
	return emulatortest.Options{Instances: []model.InstanceSpec{
		{Local: true, Zone: "us-east-1a"}, {Zone: "us-east-1a"},
	}}
}

// nodeIDs returns the emulated instances' IDs, the local one first.
func (h *harness) nodeIDs() []string {
	local := h.env.LocalInstance().ID
	ids := []string{local}
	for _, in := range h.env.Cloud().Instances() {
		if in.ID != local {
			ids = append(ids, in.ID)
		}
	}
	return ids
}

func (h *harness) publish(volumeID, nodeID string, c *csi.VolumeCapability) (*csi.ControllerPublishVolumeResponse, error) {
	return h.svc.ControllerPublishVolume(h.ctx(), &csi.ControllerPublishVolumeRequest{VolumeId: volumeID, NodeId: nodeID, VolumeCapability: c})
}

func (h *harness) unpublish(volumeID, nodeID string) error {
	_, err := h.svc.ControllerUnpublishVolume(h.ctx(), &csi.ControllerUnpublishVolumeRequest{VolumeId: volumeID, NodeId: nodeID})
	return err
}

// attachedTo lists the instances the emulator has a volume attached (or attaching) to.
func (h *harness) attachedTo(t *testing.T, volumeID string) []string {
	var ids []string
	for _, a := range h.volume(t, volumeID).Attachments {
		ids = append(ids, a.InstanceID)
	}
	slices.Sort(ids)
	return ids
}

func TestControllerPublishVolume(t *testing.T) {
	h := newHarness(t, twoNodes(), Options{})
	nodes := h.nodeIDs()
	vol := h.createVolume(t, createReq("pvc-pub", 4, "us-east-1a"))

	first, err := h.publish(vol.VolumeId, nodes[0], rwo)
	if err != nil {
		t.Fatal(err)
	}
	device := first.GetPublishContext()[volumecontext.DevicePathKey]
	if device == "" {
		t.Fatalf("publish context %v has no %s", first.GetPublishContext(), volumecontext.DevicePathKey)
	}
	describes := h.env.Calls("DescribeVolumes")
	again, err := h.publish(vol.VolumeId, nodes[0], rwo)
	if err != nil || again.GetPublishContext()[volumecontext.DevicePathKey] != device {
		t.Fatalf("second publish = %v, %v; want the same device %s", again, err, device)
	}
	// The cloud layer decides from the controller's read of the volume.
	if n := h.env.Calls("DescribeVolumes") - describes; n != 1 {
		t.Errorf("publishing an attached volume again made %d DescribeVolumes calls, want 1", n)
	}
	if got := h.attachedTo(t, vol.VolumeId); !slices.Equal(got, nodes[:1]) {
		t.Fatalf("attached to %v, want %v", got, nodes[:1])
	}
	if n := h.env.Calls("AttachVolume"); n != 1 {
		t.Fatalf("%d AttachVolume calls, want 1", n)
	}

	free := h.createVolume(t, createReq("pvc-free", 4, "us-east-1a"))
	tests := []struct {
		name string
		req  *csi.ControllerPublishVolumeRequest
		code codes.Code
		msg  string
	}{
		{name: "attached to another node", req: &csi.ControllerPublishVolumeRequest{VolumeId: vol.VolumeId, NodeId: nodes[1], VolumeCapability: rwo},
			code: codes.FailedPrecondition, msg: nodes[0]},
		{name: "no volume ID", req: &csi.ControllerPublishVolumeRequest{NodeId: nodes[0], VolumeCapability: rwo}, code: codes.InvalidArgument, msg: "volume ID is missing"},
		{name: "no node ID", req: &csi.ControllerPublishVolumeRequest{VolumeId: vol.VolumeId, VolumeCapability: rwo}, code: codes.InvalidArgument, msg: "node ID is missing"},
		{name: "no capability", req: &csi.ControllerPublishVolumeRequest{VolumeId: vol.VolumeId, NodeId: nodes[0]}, code: codes.InvalidArgument, msg: "capability is missing"},
		{name: "multi-node on a single-attach volume", req: &csi.ControllerPublishVolumeRequest{VolumeId: vol.VolumeId, NodeId: nodes[1],
			VolumeCapability: blockCap(csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER)}, code: codes.InvalidArgument, msg: "multi-attach"},
		{name: "volume does not exist", req: &csi.ControllerPublishVolumeRequest{VolumeId: "vol-0123456789abcdef0", NodeId: nodes[0], VolumeCapability: rwo}, code: codes.NotFound},
		{name: "malformed volume ID", req: &csi.ControllerPublishVolumeRequest{VolumeId: "fake-vol-id", NodeId: nodes[0], VolumeCapability: rwo}, code: codes.NotFound},
		{name: "node does not exist", req: &csi.ControllerPublishVolumeRequest{VolumeId: free.VolumeId, NodeId: "i-0123456789abcdef0", VolumeCapability: rwo}, code: codes.NotFound},
		{name: "malformed node ID", req: &csi.ControllerPublishVolumeRequest{VolumeId: free.VolumeId, NodeId: "fake-node-id", VolumeCapability: rwo}, code: codes.NotFound},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := h.svc.ControllerPublishVolume(h.ctx(), tc.req)
			wantCode(t, err, tc.code, tc.msg)
		})
	}
	if got := h.attachedTo(t, vol.VolumeId); !slices.Equal(got, nodes[:1]) {
		t.Fatalf("after the failures the volume is attached to %v, want only %v", got, nodes[:1])
	}
	if got := h.attachedTo(t, free.VolumeId); len(got) != 0 {
		t.Fatalf("a failed publish left %s attached to %v", free.VolumeId, got)
	}
}

// TestSingleNodePublishOfMultiAttachVolume: a multi-attach volume
// published with a single-node access mode is served to one node at a
// time; EC2 would attach it to a second node, so the controller must not
// ask.
func TestSingleNodePublishOfMultiAttachVolume(t *testing.T) {
	h := newHarness(t, twoNodes(), Options{})
	nodes := h.nodeIDs()
	single := blockCap(csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER)
	req := withParams(createReq("pvc-multi-single", 4, "us-east-1a"), map[string]string{"type": "io2", "iops": "400"})
	req.VolumeCapabilities = []*csi.VolumeCapability{blockCap(csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER)}
	vol := h.createVolume(t, req)
	if _, err := h.publish(vol.VolumeId, nodes[0], single); err != nil {
		t.Fatalf("publish to %s: %v", nodes[0], err)
	}
	_, err := h.publish(vol.VolumeId, nodes[1], single)
	wantCode(t, err, codes.FailedPrecondition, nodes[0])
	if got := h.attachedTo(t, vol.VolumeId); !slices.Equal(got, []string{nodes[0]}) {
		t.Fatalf("attached to %v, want only %s", got, nodes[0])
	}
	if shared := h.env.Cloud().Audit().SharedVolumes; len(shared) != 0 {
		t.Fatalf("EC2 saw volumes attached to two instances at once: %v", shared)
	}
}

func TestControllerPublishMultiAttach(t *testing.T) {
	h := newHarness(t, twoNodes(), Options{})
	nodes := h.nodeIDs()
	multi := blockCap(csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER)
	req := withParams(createReq("pvc-shared", 4, "us-east-1a"), map[string]string{"type": "io2", "iops": "400"})
	req.VolumeCapabilities = []*csi.VolumeCapability{multi}
	vol := h.createVolume(t, req)
	for _, n := range nodes {
		if _, err := h.publish(vol.VolumeId, n, multi); err != nil {
			t.Fatalf("publish to %s: %v", n, err)
		}
	}
	want := slices.Sorted(slices.Values(nodes))
	if got := h.attachedTo(t, vol.VolumeId); !slices.Equal(got, want) {
		t.Fatalf("attached to %v, want %v", got, want)
	}
	get, err := h.svc.ControllerGetVolume(h.ctx(), &csi.ControllerGetVolumeRequest{VolumeId: vol.VolumeId})
	if err != nil {
		t.Fatal(err)
	}
	if got := slices.Sorted(slices.Values(get.GetStatus().GetPublishedNodeIds())); !slices.Equal(got, want) {
		t.Fatalf("published nodes %v, want %v", got, want)
	}
	// Unpublish without a node detaches from every node.
	if err := h.unpublish(vol.VolumeId, ""); err != nil {
		t.Fatal(err)
	}
	eventually(t, "both detachments", func() bool { return len(h.attachedTo(t, vol.VolumeId)) == 0 })
}

func TestControllerUnpublishVolume(t *testing.T) {
	h := newHarness(t, twoNodes(), Options{})
	nodes := h.nodeIDs()
	vol := h.createVolume(t, createReq("pvc-unpub", 4, "us-east-1a"))
	if _, err := h.publish(vol.VolumeId, nodes[0], rwo); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, volume, node string }{
		{"attached", vol.VolumeId, nodes[0]},
		{"already detached", vol.VolumeId, nodes[0]},
		{"never attached to that node", vol.VolumeId, nodes[1]},
		{"no such node", vol.VolumeId, "i-0123456789abcdef0"},
		{"malformed node", vol.VolumeId, "fake-node-id"},
		{"no such volume", "vol-0123456789abcdef0", nodes[0]},
		{"no such volume, any node", "vol-0123456789abcdef0", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := h.unpublish(tc.volume, tc.node); err != nil {
				t.Fatalf("unpublish: %v, want success", err)
			}
		})
	}
	if got := h.attachedTo(t, vol.VolumeId); len(got) != 0 {
		t.Fatalf("still attached to %v", got)
	}
	wantCode(t, h.unpublish("", nodes[0]), codes.InvalidArgument, "volume ID is missing")
}

// TestControllerPublishAttachmentLimit fills a node and checks the next
// attach is ResourceExhausted.
func TestControllerPublishAttachmentLimit(t *testing.T) {
	h := newHarness(t, emulatortest.Options{}, Options{})
	node := h.env.LocalInstance().ID
	for i := range 40 {
		vol := h.createVolume(t, createReq(fmt.Sprintf("pvc-fill-%d", i), 1, h.env.Zone()))
		_, err := h.publish(vol.VolumeId, node, rwo)
		if err == nil {
			continue
		}
		wantCode(t, err, codes.ResourceExhausted, "")
		if i < 20 {
			t.Fatalf("limit reached after %d volumes; an m5.large holds more", i)
		}
		return
	}
	t.Fatal("40 attachments to one m5.large never hit its limit")
}

func TestValidateVolumeCapabilities(t *testing.T) {
	h := newHarness(t, emulatortest.Options{}, Options{})
	vol := h.createVolume(t, createReq("pvc-validate", 1, ""))
	multi := blockCap(csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER)
	tests := []struct {
		name      string
		req       *csi.ValidateVolumeCapabilitiesRequest
		confirmed bool
		message   string
		code      codes.Code
	}{
		{name: "single node mount", req: &csi.ValidateVolumeCapabilitiesRequest{VolumeId: vol.VolumeId,
			VolumeCapabilities: []*csi.VolumeCapability{rwo, blockCap(csi.VolumeCapability_AccessMode_SINGLE_NODE_MULTI_WRITER)},
			VolumeContext:      map[string]string{"fsType": "ext4"}, Parameters: map[string]string{"type": "gp3"}}, confirmed: true},
		{name: "multi-node on a single-attach volume", req: &csi.ValidateVolumeCapabilitiesRequest{VolumeId: vol.VolumeId,
			VolumeCapabilities: []*csi.VolumeCapability{multi}}, message: "multi-attach"},
		{name: "no such volume", req: &csi.ValidateVolumeCapabilitiesRequest{VolumeId: "vol-0123456789abcdef0", VolumeCapabilities: []*csi.VolumeCapability{rwo}}, code: codes.NotFound},
		{name: "no volume ID", req: &csi.ValidateVolumeCapabilitiesRequest{VolumeCapabilities: []*csi.VolumeCapability{rwo}}, code: codes.InvalidArgument},
		{name: "no capabilities", req: &csi.ValidateVolumeCapabilitiesRequest{VolumeId: vol.VolumeId}, code: codes.InvalidArgument},
		{name: "unsupported mode", req: &csi.ValidateVolumeCapabilitiesRequest{VolumeId: vol.VolumeId,
			VolumeCapabilities: []*csi.VolumeCapability{mountCap(csi.VolumeCapability_AccessMode_MULTI_NODE_SINGLE_WRITER, "")}}, code: codes.InvalidArgument},
		{name: "bad parameters", req: &csi.ValidateVolumeCapabilitiesRequest{VolumeId: vol.VolumeId,
			VolumeCapabilities: []*csi.VolumeCapability{rwo}, Parameters: map[string]string{"colour": "blue"}}, code: codes.InvalidArgument},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			resp, err := h.svc.ValidateVolumeCapabilities(h.ctx(), tc.req)
			if tc.code != codes.OK {
				wantCode(t, err, tc.code, "")
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := resp.GetConfirmed() != nil; got != tc.confirmed {
				t.Fatalf("confirmed = %v (%v), want %v", got, resp, tc.confirmed)
			}
			if tc.confirmed && len(resp.GetConfirmed().GetVolumeCapabilities()) != len(tc.req.GetVolumeCapabilities()) {
				t.Fatalf("confirmed %v, want the requested capabilities", resp.GetConfirmed())
			}
			if !tc.confirmed && resp.GetMessage() == "" {
				t.Fatal("an unconfirmed answer must say why")
			}
		})
	}
}
