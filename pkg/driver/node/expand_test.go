package node

import (
	"context"
	"errors"
	"reflect"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"

	"github.com/diskplane/diskplane/pkg/mounter"
)

// published puts the fake in the state stage and publish leave.
func published(f *fakeOS) {
	staged(f)
	f.paths[target] = "dir"
	f.mounts[target] = fakeMount{source: staging}
}

// publishedBlock puts the fake in the state a block publish leaves.
func publishedBlock(f *fakeOS) {
	f.paths[target] = "file"
	f.mounts[target] = fakeMount{source: volDev}
}

func TestNodeExpandVolume(t *testing.T) {
	tests := []struct {
		name     string
		setup    func(f *fakeOS)
		req      *csi.NodeExpandVolumeRequest
		code     codes.Code
		wantSize int64
		want     []string
	}{
		{
			name: "grows the mounted filesystem to the device and reports the device's size",
			setup: func(f *fakeOS) {
				published(f)
				f.deviceSizes[volDev] = 4 * gib
			},
			req:      &csi.NodeExpandVolumeRequest{VolumeId: volID, VolumePath: target, CapacityRange: &csi.CapacityRange{RequiredBytes: 4 * gib}},
			wantSize: 4 * gib,
			want:     []string{"resize " + volDev + " " + target},
		},
		{
			name:     "filesystem already as big as the device: measured, not grown",
			setup:    published,
			req:      &csi.NodeExpandVolumeRequest{VolumeId: volID, VolumePath: target, VolumeCapability: mountCap("ext4")},
			wantSize: gib,
		},
		{
			name: "the capacity is measured, not echoed",
			setup: func(f *fakeOS) {
				published(f)
				f.deviceSizes[volDev] = 5 * gib
			},
			req:      &csi.NodeExpandVolumeRequest{VolumeId: volID, VolumePath: target, CapacityRange: &csi.CapacityRange{RequiredBytes: 2 * gib}},
			wantSize: 5 * gib,
			want:     []string{"resize " + volDev + " " + target},
		},
		{
			name:  "device smaller than requested: the modification has not arrived yet",
			setup: published,
			req:   &csi.NodeExpandVolumeRequest{VolumeId: volID, VolumePath: target, CapacityRange: &csi.CapacityRange{RequiredBytes: 2 * gib}},
			code:  codes.FailedPrecondition,
		},
		{
			name: "block volume by capability: size only",
			setup: func(f *fakeOS) {
				publishedBlock(f)
				f.deviceSizes[volDev] = 3 * gib
			},
			req:      &csi.NodeExpandVolumeRequest{VolumeId: volID, VolumePath: target, VolumeCapability: blockCap()},
			wantSize: 3 * gib,
		},
		{
			name:     "block volume found from the path",
			setup:    publishedBlock,
			req:      &csi.NodeExpandVolumeRequest{VolumeId: volID, VolumePath: target},
			wantSize: gib,
		},
		{
			name: "device mounted there is another volume's",
			setup: func(f *fakeOS) {
				published(f)
				f.devices[volID] = "/dev/nvme7n1"
			},
			req:  &csi.NodeExpandVolumeRequest{VolumeId: volID, VolumePath: target},
			code: codes.FailedPrecondition,
		},
		{
			name: "resize failure",
			setup: func(f *fakeOS) {
				published(f)
				f.deviceSizes[volDev] = 2 * gib
				f.failOn["Resize"] = errors.New("resize2fs: Permission denied")
			},
			req:  &csi.NodeExpandVolumeRequest{VolumeId: volID, VolumePath: target},
			code: codes.Internal,
		},
		{
			name: "device cannot be measured",
			setup: func(f *fakeOS) {
				publishedBlock(f)
				f.failOn["DeviceSize"] = errors.New("open: no such device")
			},
			req:  &csi.NodeExpandVolumeRequest{VolumeId: volID, VolumePath: target, VolumeCapability: blockCap()},
			code: codes.Internal,
		},
		{
			name: "path does not exist",
			req:  &csi.NodeExpandVolumeRequest{VolumeId: volID, VolumePath: target},
			code: codes.NotFound,
		},
		{
			name: "relative path cannot be a volume",
			req:  &csi.NodeExpandVolumeRequest{VolumeId: volID, VolumePath: "some/path"},
			code: codes.NotFound,
		},
		{
			name:  "path is not mounted",
			setup: func(f *fakeOS) { f.paths[target] = "dir" },
			req:   &csi.NodeExpandVolumeRequest{VolumeId: volID, VolumePath: target},
			code:  codes.NotFound,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, f := newTestService(t)
			if tc.setup != nil {
				tc.setup(f)
			}
			resp, err := s.NodeExpandVolume(context.Background(), tc.req)
			wantCode(t, err, tc.code)
			if err == nil && resp.CapacityBytes != tc.wantSize {
				t.Fatalf("capacity = %d, want %d", resp.CapacityBytes, tc.wantSize)
			}
			if !reflect.DeepEqual(f.calls, tc.want) {
				t.Fatalf("OS calls:\n got %q\nwant %q", f.calls, tc.want)
			}
		})
	}
}

func TestNodeGetVolumeStats(t *testing.T) {
	fsStats := mounter.Stats{TotalBytes: 1000, AvailableBytes: 600, UsedBytes: 400, TotalInodes: 50, FreeInodes: 45, UsedInodes: 5}
	tests := []struct {
		name  string
		setup func(f *fakeOS)
		path  string
		code  codes.Code
		want  []*csi.VolumeUsage
	}{
		{
			name:  "filesystem: bytes and inodes",
			setup: func(f *fakeOS) { published(f); f.stats[volDev] = fsStats },
			path:  target,
			want: []*csi.VolumeUsage{
				{Unit: csi.VolumeUsage_BYTES, Total: 1000, Available: 600, Used: 400},
				{Unit: csi.VolumeUsage_INODES, Total: 50, Available: 45, Used: 5},
			},
		},
		{
			name:  "staging path works too",
			setup: func(f *fakeOS) { staged(f); f.stats[volDev] = fsStats },
			path:  staging,
			want: []*csi.VolumeUsage{
				{Unit: csi.VolumeUsage_BYTES, Total: 1000, Available: 600, Used: 400},
				{Unit: csi.VolumeUsage_INODES, Total: 50, Available: 45, Used: 5},
			},
		},
		{
			name:  "block: size",
			setup: publishedBlock,
			path:  target,
			want:  []*csi.VolumeUsage{{Unit: csi.VolumeUsage_BYTES, Total: gib}},
		},
		{name: "missing path", path: target, code: codes.NotFound},
		{name: "relative path cannot be a volume", setup: published, path: "some/path", code: codes.NotFound},
		{name: "path with .. cannot be a volume", setup: published, path: target + "/../mount", code: codes.NotFound},
		{name: "unmounted directory", setup: func(f *fakeOS) { f.paths[target] = "dir" }, path: target, code: codes.NotFound},
		{
			name:  "corrupted mount",
			setup: func(f *fakeOS) { published(f); f.corrupted[target] = true },
			path:  target,
			code:  codes.Internal,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, f := newTestService(t)
			if tc.setup != nil {
				tc.setup(f)
			}
			resp, err := s.NodeGetVolumeStats(context.Background(), &csi.NodeGetVolumeStatsRequest{VolumeId: volID, VolumePath: tc.path})
			wantCode(t, err, tc.code)
			if err == nil && !reflect.DeepEqual(resp.Usage, tc.want) {
				t.Fatalf("usage = %v, want %v", resp.Usage, tc.want)
			}
			if len(f.calls) != 0 {
				t.Fatalf("stats changed something: %q", f.calls)
			}
		})
	}
}
