package node

import (
	"context"
	"errors"
	"reflect"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
)

func TestNodeStageVolume(t *testing.T) {
	tests := []struct {
		name  string
		setup func(f *fakeOS)
		req   func() *csi.NodeStageVolumeRequest
		code  codes.Code
		// want are the recorded OS calls, in order.
		want []string
	}{
		{
			name: "blank device is formatted ext4 by default and mounted",
			req:  func() *csi.NodeStageVolumeRequest { return stageReq(mountCap("")) },
			want: []string{"MakeDir " + staging, "mkfs.ext4  " + volDev, "mount -t ext4 -o  " + volDev + " " + staging},
		},
		{
			name: "xfs gets nouuid",
			req:  func() *csi.NodeStageVolumeRequest { return stageReq(mountCap("xfs")) },
			want: []string{"MakeDir " + staging, "mkfs.xfs  " + volDev, "mount -t xfs -o nouuid " + volDev + " " + staging},
		},
		{
			name: "xfs keeps an explicit nouuid once",
			req:  func() *csi.NodeStageVolumeRequest { return stageReq(mountCap("xfs", "noatime", "nouuid")) },
			want: []string{"MakeDir " + staging, "mkfs.xfs  " + volDev, "mount -t xfs -o noatime,nouuid " + volDev + " " + staging},
		},
		{
			name: "mount flags from the capability",
			req:  func() *csi.NodeStageVolumeRequest { return stageReq(mountCap("ext4", "noatime", "discard")) },
			want: []string{"MakeDir " + staging, "mkfs.ext4  " + volDev, "mount -t ext4 -o noatime,discard " + volDev + " " + staging},
		},
		{
			name: "format options from the volume context become mkfs arguments",
			req: func() *csi.NodeStageVolumeRequest {
				r := stageReq(mountCap("ext4"))
				r.VolumeContext = map[string]string{"blockSize": "4096", "inodeSize": "512", "ext4BigAlloc": "true", "ext4ClusterSize": "65536"}
				return r
			},
			want: []string{"MakeDir " + staging, "mkfs.ext4 -b 4096 -I 512 -O bigalloc -C 65536 " + volDev, "mount -t ext4 -o  " + volDev + " " + staging},
		},
		{
			name: "xfs format options",
			req: func() *csi.NodeStageVolumeRequest {
				r := stageReq(mountCap("xfs"))
				r.VolumeContext = map[string]string{"blockSize": "2048", "inodeSize": "1024"}
				return r
			},
			want: []string{"MakeDir " + staging, "mkfs.xfs -b size=2048 -i size=1024 " + volDev, "mount -t xfs -o nouuid " + volDev + " " + staging},
		},
		{
			name: "fs type from the volume context when the capability has none",
			req: func() *csi.NodeStageVolumeRequest {
				r := stageReq(mountCap(""))
				r.VolumeContext = map[string]string{"fsType": "xfs"}
				return r
			},
			want: []string{"MakeDir " + staging, "mkfs.xfs  " + volDev, "mount -t xfs -o nouuid " + volDev + " " + staging},
		},
		{
			name: "the capability's fs type wins over the volume context",
			req: func() *csi.NodeStageVolumeRequest {
				r := stageReq(mountCap("ext3"))
				r.VolumeContext = map[string]string{"fsType": "xfs"}
				return r
			},
			want: []string{"MakeDir " + staging, "mkfs.ext3  " + volDev, "mount -t ext3 -o  " + volDev + " " + staging},
		},
		{
			name:  "device with the requested filesystem is mounted as it is",
			setup: func(f *fakeOS) { f.formats[volDev] = "ext4"; f.fsSizes[volDev] = gib },
			req:   func() *csi.NodeStageVolumeRequest { return stageReq(mountCap("ext4")) },
			want:  []string{"MakeDir " + staging, "mount -t ext4 -o  " + volDev + " " + staging},
		},
		{
			name:  "device holding another filesystem is refused and left alone",
			setup: func(f *fakeOS) { f.formats[volDev] = "xfs"; f.fsSizes[volDev] = gib },
			req:   func() *csi.NodeStageVolumeRequest { return stageReq(mountCap("ext4")) },
			code:  codes.FailedPrecondition,
			want:  []string{"MakeDir " + staging},
		},
		{
			name: "volume expanded while detached: the filesystem is grown after mounting",
			setup: func(f *fakeOS) {
				f.formats[volDev] = "ext4"
				f.fsSizes[volDev] = gib
				f.deviceSizes[volDev] = 2 * gib
			},
			req:  func() *csi.NodeStageVolumeRequest { return stageReq(mountCap("ext4")) },
			want: []string{"MakeDir " + staging, "mount -t ext4 -o  " + volDev + " " + staging, "resize " + volDev + " " + staging},
		},
		{
			name: "already staged with this device: nothing to do",
			setup: func(f *fakeOS) {
				f.formats[volDev] = "ext4"
				f.fsSizes[volDev] = gib
				f.paths[staging] = "dir"
				f.mounts[staging] = fakeMount{source: volDev, fsType: "ext4"}
			},
			req: func() *csi.NodeStageVolumeRequest { return stageReq(mountCap("ext4")) },
		},
		{
			name: "already staged but the filesystem was not grown yet: grown now",
			setup: func(f *fakeOS) {
				f.formats[volDev] = "ext4"
				f.fsSizes[volDev] = gib
				f.deviceSizes[volDev] = 3 * gib
				f.paths[staging] = "dir"
				f.mounts[staging] = fakeMount{source: volDev, fsType: "ext4"}
			},
			req:  func() *csi.NodeStageVolumeRequest { return stageReq(mountCap("ext4")) },
			want: []string{"resize " + volDev + " " + staging},
		},
		{
			name: "staged with another device",
			setup: func(f *fakeOS) {
				f.paths[staging] = "dir"
				f.mounts[staging] = fakeMount{source: "/dev/nvme9n1", fsType: "ext4"}
			},
			req:  func() *csi.NodeStageVolumeRequest { return stageReq(mountCap("ext4")) },
			code: codes.FailedPrecondition,
		},
		{
			name: "corrupted staging mount is unmounted and mounted again",
			setup: func(f *fakeOS) {
				f.formats[volDev] = "ext4"
				f.fsSizes[volDev] = gib
				f.paths[staging] = "dir"
				f.corrupted[staging] = true
			},
			req:  func() *csi.NodeStageVolumeRequest { return stageReq(mountCap("ext4")) },
			want: []string{"umount " + staging, "mount -t ext4 -o  " + volDev + " " + staging},
		},
		{
			name:  "device not found",
			setup: func(f *fakeOS) { delete(f.devices, volID) },
			req:   func() *csi.NodeStageVolumeRequest { return stageReq(mountCap("ext4")) },
			code:  codes.NotFound,
		},
		{
			name:  "device that is not the volume is refused before anything is written",
			setup: func(f *fakeOS) { f.wrongDevice[volID] = true },
			req:   func() *csi.NodeStageVolumeRequest { return stageReq(mountCap("ext4")) },
			code:  codes.FailedPrecondition,
		},
		{
			name:  "mount failure",
			setup: func(f *fakeOS) { f.failOn["FormatAndMount"] = errors.New("mount: wrong fs type") },
			req:   func() *csi.NodeStageVolumeRequest { return stageReq(mountCap("ext4")) },
			code:  codes.Internal,
			want:  []string{"MakeDir " + staging},
		},
		{
			name:  "staging directory cannot be created: nothing is formatted",
			setup: func(f *fakeOS) { f.failOn["MakeDir"] = errors.New("read-only file system") },
			req:   func() *csi.NodeStageVolumeRequest { return stageReq(mountCap("ext4")) },
			code:  codes.Internal,
		},
		{
			name: "corrupted staging mount that cannot be unmounted fails the stage",
			setup: func(f *fakeOS) {
				f.formats[volDev] = "ext4"
				f.paths[staging] = "dir"
				f.corrupted[staging] = true
				f.failOn["Unmount"] = errors.New("device or resource busy")
			},
			req:  func() *csi.NodeStageVolumeRequest { return stageReq(mountCap("ext4")) },
			code: codes.Internal,
		},
		{
			name: "resize failure fails the stage",
			setup: func(f *fakeOS) {
				f.formats[volDev] = "ext4"
				f.fsSizes[volDev] = gib
				f.deviceSizes[volDev] = 2 * gib
				f.failOn["Resize"] = errors.New("resize2fs: Permission denied")
			},
			req:  func() *csi.NodeStageVolumeRequest { return stageReq(mountCap("ext4")) },
			code: codes.Internal,
			want: []string{"MakeDir " + staging, "mount -t ext4 -o  " + volDev + " " + staging},
		},
		{
			name: "single-node reader-only filesystem is staged like any other",
			req: func() *csi.NodeStageVolumeRequest {
				return stageReq(withMode(mountCap("ext4"), csi.VolumeCapability_AccessMode_SINGLE_NODE_READER_ONLY))
			},
			want: []string{"MakeDir " + staging, "mkfs.ext4  " + volDev, "mount -t ext4 -o  " + volDev + " " + staging},
		},
		{
			name: "block volume: staging does nothing",
			req:  func() *csi.NodeStageVolumeRequest { return stageReq(blockCap()) },
		},
		{
			name: "multi-attach block volume: staging does nothing",
			req: func() *csi.NodeStageVolumeRequest {
				return stageReq(withMode(blockCap(), csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER))
			},
		},
		{
			name: "multi-attach reader-only block volume: staging does nothing",
			req: func() *csi.NodeStageVolumeRequest {
				return stageReq(withMode(blockCap(), csi.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY))
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, f := newTestService(t)
			if tc.setup != nil {
				tc.setup(f)
			}
			_, err := s.NodeStageVolume(context.Background(), tc.req())
			wantCode(t, err, tc.code)
			if !reflect.DeepEqual(f.calls, tc.want) {
				t.Fatalf("OS calls:\n got %q\nwant %q", f.calls, tc.want)
			}
		})
	}
}

func TestNodeStageVolumeTwice(t *testing.T) {
	s, f := newTestService(t)
	for i := 0; i < 2; i++ {
		_, err := s.NodeStageVolume(context.Background(), stageReq(mountCap("xfs")))
		wantCode(t, err, codes.OK)
	}
	if n := len(f.recorded("mkfs")); n != 1 {
		t.Fatalf("formatted %d times, want once", n)
	}
	if n := len(f.recorded("mount")); n != 1 {
		t.Fatalf("mounted %d times, want once", n)
	}
}

func TestNodeUnstageVolume(t *testing.T) {
	tests := []struct {
		name  string
		setup func(f *fakeOS)
		code  codes.Code
		want  []string
	}{
		{
			name: "mounted: unmounted, the directory stays for the CO",
			setup: func(f *fakeOS) {
				f.paths[staging] = "dir"
				f.mounts[staging] = fakeMount{source: volDev}
			},
			want: []string{"umount " + staging},
		},
		{name: "not mounted: done", setup: func(f *fakeOS) { f.paths[staging] = "dir" }},
		{name: "gone: done"},
		{
			name: "corrupted mount is unmounted",
			setup: func(f *fakeOS) {
				f.paths[staging] = "dir"
				f.corrupted[staging] = true
			},
			want: []string{"umount " + staging},
		},
		{
			name: "unmount failure",
			setup: func(f *fakeOS) {
				f.paths[staging] = "dir"
				f.mounts[staging] = fakeMount{source: volDev}
				f.failOn["Unmount"] = errors.New("target is busy")
			},
			code: codes.Internal,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, f := newTestService(t)
			if tc.setup != nil {
				tc.setup(f)
			}
			_, err := s.NodeUnstageVolume(context.Background(), &csi.NodeUnstageVolumeRequest{VolumeId: volID, StagingTargetPath: staging})
			wantCode(t, err, tc.code)
			if !reflect.DeepEqual(f.calls, tc.want) {
				t.Fatalf("OS calls:\n got %q\nwant %q", f.calls, tc.want)
			}
		})
	}
}

// TestStageUnstageCycleKeepsFormat checks that staging again after an
// unstage mounts the same filesystem rather than formatting again.
func TestStageUnstageCycleKeepsFormat(t *testing.T) {
	s, f := newTestService(t)
	ctx := context.Background()
	for i := 0; i < 3; i++ {
		_, err := s.NodeStageVolume(ctx, stageReq(mountCap("ext4")))
		wantCode(t, err, codes.OK)
		_, err = s.NodeUnstageVolume(ctx, &csi.NodeUnstageVolumeRequest{VolumeId: volID, StagingTargetPath: staging})
		wantCode(t, err, codes.OK)
	}
	if n := len(f.recorded("mkfs")); n != 1 {
		t.Fatalf("formatted %d times over three stages, want once", n)
	}
	if _, mounted := f.mountedAt(staging); mounted {
		t.Fatal("staging path still mounted after unstage")
	}
}
