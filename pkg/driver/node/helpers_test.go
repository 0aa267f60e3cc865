package node

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/diskplane/diskplane/pkg/cloud/metadata"
)

const (
	volID  = "vol-0123456789abcdef0"
	volDev = "/dev/nvme1n1"
	gib    = int64(1) << 30
)

// The kubelet's paths of a volume, under kubeletDir: the tests run on Linux
// and, under Wine, on Windows, each with the paths its kubelet sends.
var (
	staging = filepath.Join(kubeletDir, "plugins", "kubernetes.io", "csi", "ebs.csi.diskplane.io", "abc", "globalmount")
	target  = filepath.Join(kubeletDir, "pods", "p1", "volumes", "kubernetes.io~csi", "pvc-1", "mount")
)

func testInstance() *metadata.Instance {
	return &metadata.Instance{ID: "i-0123456789abcdef0", Type: "m5.large", Region: "us-east-1", Zone: "us-east-1a",
		NetworkInterfaces: 1, BlockDeviceMappings: map[string]string{"ami": "/dev/xvda", "root": "/dev/xvda"}}
}

// staticMetadata is a metadata source that always answers in.
func staticMetadata(in *metadata.Instance) func(context.Context) (*metadata.Instance, error) {
	return func(context.Context) (*metadata.Instance, error) { return in, nil }
}

// newTestService returns a node service over a fake OS holding one blank
// 1 GiB volume, volID, at volDev.
func newTestService(t *testing.T) (*Service, *fakeOS) {
	t.Helper()
	f := newFakeOS()
	f.addVolume(volID, volDev, gib)
	s, err := New(Config{Metadata: staticMetadata(testInstance()), Mounter: f, ReservedVolumeAttachments: -1})
	if err != nil {
		t.Fatal(err)
	}
	return s, f
}

func mountCap(fsType string, flags ...string) *csi.VolumeCapability {
	return &csi.VolumeCapability{
		AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{FsType: fsType, MountFlags: flags}},
		AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
	}
}

func blockCap() *csi.VolumeCapability {
	return &csi.VolumeCapability{
		AccessType: &csi.VolumeCapability_Block{Block: &csi.VolumeCapability_BlockVolume{}},
		AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
	}
}

func withMode(c *csi.VolumeCapability, mode csi.VolumeCapability_AccessMode_Mode) *csi.VolumeCapability {
	c.AccessMode = &csi.VolumeCapability_AccessMode{Mode: mode}
	return c
}

func stageReq(c *csi.VolumeCapability) *csi.NodeStageVolumeRequest {
	return &csi.NodeStageVolumeRequest{VolumeId: volID, StagingTargetPath: staging, VolumeCapability: c,
		PublishContext: map[string]string{"devicePath": "/dev/xvdaa"}}
}

func publishReq(c *csi.VolumeCapability) *csi.NodePublishVolumeRequest {
	return &csi.NodePublishVolumeRequest{VolumeId: volID, StagingTargetPath: staging, TargetPath: target,
		VolumeCapability: c, PublishContext: map[string]string{"devicePath": "/dev/xvdaa"}}
}

// wantCode fails the test unless err carries code (codes.OK: no error).
func wantCode(t *testing.T, err error, code codes.Code) {
	t.Helper()
	if got := status.Code(err); got != code {
		t.Fatalf("got %v (%v), want code %v", got, err, code)
	}
}
