package node

import (
	"context"
	"reflect"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"

	"github.com/diskplane/diskplane/pkg/mounter"
)

// newWindowsTestService is newTestService on a fake OS that can do what a
// Windows node can: NTFS only, no block, no mount flags, no read-only or
// listable publications, no inodes.
func newWindowsTestService(t *testing.T) (*Service, *fakeOS) {
	t.Helper()
	f := newFakeOS()
	f.platform = mounter.WindowsPlatform
	f.addVolume(volID, volDev, gib)
	s, err := New(Config{Metadata: staticMetadata(testInstance()), Mounter: f, ReservedVolumeAttachments: -1})
	if err != nil {
		t.Fatal(err)
	}
	return s, f
}

// TestPlatformRefusals checks that a request the node's operating system
// cannot serve is InvalidArgument before anything on the node is touched.
func TestPlatformRefusals(t *testing.T) {
	ctx := context.Background()
	stage := func(c *csi.VolumeCapability) func(s *Service) error {
		return func(s *Service) error { _, err := s.NodeStageVolume(ctx, stageReq(c)); return err }
	}
	publish := func(c *csi.VolumeCapability) func(s *Service) error {
		return func(s *Service) error { _, err := s.NodePublishVolume(ctx, publishReq(c)); return err }
	}
	expand := func(c *csi.VolumeCapability) func(s *Service) error {
		return func(s *Service) error {
			_, err := s.NodeExpandVolume(ctx, &csi.NodeExpandVolumeRequest{VolumeId: volID, VolumePath: target, VolumeCapability: c})
			return err
		}
	}
	tests := []struct {
		name    string
		windows bool
		call    func(s *Service) error
	}{
		{name: "ntfs on linux", call: stage(mountCap("ntfs"))},
		{name: "NTFS in the volume context on linux", call: func(s *Service) error {
			r := stageReq(mountCap(""))
			r.VolumeContext = map[string]string{"fsType": "NTFS"}
			_, err := s.NodeStageVolume(ctx, r)
			return err
		}},
		{name: "ext4 on windows", windows: true, call: stage(mountCap("ext4"))},
		{name: "xfs in the volume context on windows", windows: true, call: func(s *Service) error {
			r := stageReq(mountCap(""))
			r.VolumeContext = map[string]string{"fsType": "xfs"}
			_, err := s.NodeStageVolume(ctx, r)
			return err
		}},
		{name: "format option on windows", windows: true, call: func(s *Service) error {
			r := stageReq(mountCap("ntfs"))
			r.VolumeContext = map[string]string{"blockSize": "4096"}
			_, err := s.NodeStageVolume(ctx, r)
			return err
		}},
		{name: "stage block on windows", windows: true, call: stage(blockCap())},
		{name: "publish block on windows", windows: true, call: publish(blockCap())},
		{name: "expand block on windows", windows: true, call: expand(blockCap())},
		{name: "mount flags on windows", windows: true, call: stage(mountCap("ntfs", "noatime"))},
		{name: "publish with mount flags on windows", windows: true, call: publish(mountCap("ntfs", "noatime"))},
		{name: "single writer on windows", windows: true,
			call: publish(withMode(mountCap("ntfs"), csi.VolumeCapability_AccessMode_SINGLE_NODE_SINGLE_WRITER))},
		{name: "multi writer on windows", windows: true,
			call: stage(withMode(mountCap("ntfs"), csi.VolumeCapability_AccessMode_SINGLE_NODE_MULTI_WRITER))},
		// The symlink cannot be read-only, and the runtime mounts the volume
		// read-only only when the publish says so.
		{name: "reader-only published writable on windows", windows: true,
			call: publish(withMode(mountCap("ntfs"), csi.VolumeCapability_AccessMode_SINGLE_NODE_READER_ONLY))},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, f := newTestService(t)
			if tc.windows {
				s, f = newWindowsTestService(t)
			}
			staged(f)
			published(f)
			f.calls = nil
			wantCode(t, tc.call(s), codes.InvalidArgument)
			if len(f.calls) != 0 {
				t.Fatalf("refused request changed something: %q", f.calls)
			}
		})
	}
}

// TestWindowsStage checks that a Windows node formats NTFS when a request
// names no filesystem, or names ntfs in any case.
func TestWindowsStage(t *testing.T) {
	for _, fsType := range []string{"", "ntfs", "NTFS"} {
		t.Run("fsType "+fsType, func(t *testing.T) {
			s, f := newWindowsTestService(t)
			if _, err := s.NodeStageVolume(context.Background(), stageReq(mountCap(fsType))); err != nil {
				t.Fatal(err)
			}
			want := []string{"MakeDir " + staging, "mkfs.ntfs  " + volDev, "mount -t ntfs -o  " + volDev + " " + staging}
			if !reflect.DeepEqual(f.calls, want) {
				t.Fatalf("OS calls:\n got %q\nwant %q", f.calls, want)
			}
		})
	}
}

// TestWindowsPublishReadOnly checks that a read-only publication on Windows
// is made, and that repeating it, either way, is answered as done: a symlink
// has no read-only state to compare (the container runtime mounts the
// volume read-only into the pod), unlike a Linux bind mount, where the
// other read-only state is ALREADY_EXISTS.
func TestWindowsPublishReadOnly(t *testing.T) {
	ctx := context.Background()
	s, f := newWindowsTestService(t)
	f.formats[volDev] = "ntfs"
	f.paths[staging] = "dir"
	f.mounts[staging] = fakeMount{source: volDev, fsType: "ntfs"}
	for _, readOnly := range []bool{true, true, false} {
		r := publishReq(mountCap("ntfs"))
		r.Readonly = readOnly
		wantCode(t, func() error { _, err := s.NodePublishVolume(ctx, r); return err }(), codes.OK)
	}
	if binds := f.recorded("bind"); len(binds) != 1 {
		t.Fatalf("published %d times, want once: %q", len(binds), binds)
	}

	// A reader-only volume is published when the publish is read-only.
	s, f = newWindowsTestService(t)
	f.formats[volDev] = "ntfs"
	f.paths[staging] = "dir"
	f.mounts[staging] = fakeMount{source: volDev, fsType: "ntfs"}
	r := publishReq(withMode(mountCap("ntfs"), csi.VolumeCapability_AccessMode_SINGLE_NODE_READER_ONLY))
	r.Readonly = true
	wantCode(t, func() error { _, err := s.NodePublishVolume(ctx, r); return err }(), codes.OK)
	if binds := f.recorded("bind"); len(binds) != 1 {
		t.Fatalf("reader-only volume published %d times, want once: %q", len(binds), binds)
	}
}

// TestWindowsCapabilitiesAndInfo checks what a Windows node offers: no
// SINGLE_NODE_MULTI_WRITER (the kubelet then sends SINGLE_NODE_WRITER), the
// windows OS topology, and volume stats in bytes only.
func TestWindowsCapabilitiesAndInfo(t *testing.T) {
	ctx := context.Background()
	s, f := newWindowsTestService(t)
	caps, err := s.NodeGetCapabilities(ctx, &csi.NodeGetCapabilitiesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range caps.Capabilities {
		if c.GetRpc().GetType() == csi.NodeServiceCapability_RPC_SINGLE_NODE_MULTI_WRITER {
			t.Fatal("a Windows node offers SINGLE_NODE_MULTI_WRITER")
		}
	}
	if len(caps.Capabilities) != len(nodeCapabilities) {
		t.Fatalf("capabilities = %v, want %v", caps.Capabilities, nodeCapabilities)
	}
	info, err := s.NodeGetInfo(ctx, &csi.NodeGetInfoRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if os := info.AccessibleTopology.GetSegments()[OSTopologyKey]; os != "windows" {
		t.Fatalf("%s = %q, want windows", OSTopologyKey, os)
	}
	published(f)
	f.stats[volDev] = mounter.Stats{TotalBytes: 1000, AvailableBytes: 600, UsedBytes: 400}
	stats, err := s.NodeGetVolumeStats(ctx, &csi.NodeGetVolumeStatsRequest{VolumeId: volID, VolumePath: target})
	if err != nil {
		t.Fatal(err)
	}
	want := []*csi.VolumeUsage{{Unit: csi.VolumeUsage_BYTES, Total: 1000, Available: 600, Used: 400}}
	if !reflect.DeepEqual(stats.Usage, want) {
		t.Fatalf("usage = %v, want %v", stats.Usage, want)
	}
}
