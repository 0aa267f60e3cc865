package node

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/diskplane/diskplane/pkg/cloud/metadata"
)

func TestNewRefusesIncompleteConfig(t *testing.T) {
	for name, cfg := range map[string]Config{
		"no mounter":  {Metadata: staticMetadata(testInstance())},
		"no metadata": {Mounter: newFakeOS()},
	} {
		if _, err := New(cfg); err == nil {
			t.Errorf("%s: New accepted %+v", name, cfg)
		}
	}
}

// TestNodeGetInfoWaitsForMetadata checks that a node whose metadata source
// fails (IMDS unreachable at boot) answers Unavailable, asks again on the
// next call, and keeps the first complete answer.
func TestNodeGetInfoWaitsForMetadata(t *testing.T) {
	answers := []struct {
		in  *metadata.Instance
		err error
	}{
		{err: errors.New("imds: connection refused")},
		{in: &metadata.Instance{Zone: "us-east-1a"}},
		{in: &metadata.Instance{ID: "i-1"}},
		{in: testInstance()},
		{err: errors.New("must not be asked again")},
	}
	asked := 0
	source := func(context.Context) (*metadata.Instance, error) {
		a := answers[asked]
		asked++
		return a.in, a.err
	}
	s, err := New(Config{Metadata: source, Mounter: newFakeOS(), ReservedVolumeAttachments: -1})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for i, want := range []codes.Code{codes.Unavailable, codes.Unavailable, codes.Unavailable, codes.OK, codes.OK} {
		resp, err := s.NodeGetInfo(ctx, &csi.NodeGetInfoRequest{})
		if status.Code(err) != want {
			t.Fatalf("call %d: %v, want %v", i, err, want)
		}
		if err == nil && resp.NodeId != testInstance().ID {
			t.Fatalf("call %d: node ID %q", i, resp.NodeId)
		}
	}
	if asked != 4 {
		t.Fatalf("metadata asked %d times, want 4", asked)
	}
}

func TestNodeGetCapabilities(t *testing.T) {
	s, _ := newTestService(t)
	resp, err := s.NodeGetCapabilities(context.Background(), &csi.NodeGetCapabilitiesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var got []csi.NodeServiceCapability_RPC_Type
	for _, c := range resp.Capabilities {
		got = append(got, c.GetRpc().GetType())
	}
	want := []csi.NodeServiceCapability_RPC_Type{
		csi.NodeServiceCapability_RPC_STAGE_UNSTAGE_VOLUME, csi.NodeServiceCapability_RPC_EXPAND_VOLUME,
		csi.NodeServiceCapability_RPC_GET_VOLUME_STATS, csi.NodeServiceCapability_RPC_SINGLE_NODE_MULTI_WRITER,
	}
	if !slices.Equal(got, want) {
		t.Fatalf("capabilities = %v, want %v", got, want)
	}
	plugin := s.PluginCapabilities()
	if len(plugin) != 1 || plugin[0].GetService().GetType() != csi.PluginCapability_Service_VOLUME_ACCESSIBILITY_CONSTRAINTS {
		t.Fatalf("plugin capabilities = %v, want VOLUME_ACCESSIBILITY_CONSTRAINTS", plugin)
	}
}

func TestNodeGetInfo(t *testing.T) {
	tests := []struct {
		name      string
		instance  func(in *metadata.Instance)
		cfg       func(c *Config)
		nvmeStore int
		storeErr  error
		want      int64
	}{
		{name: "m5.large with root only", want: 26},
		{name: "launch-time EBS volumes take slots", instance: func(in *metadata.Instance) {
			in.BlockDeviceMappings["ebs1"] = "/dev/sdb"
			in.BlockDeviceMappings["ebs2"] = "/dev/sdc"
		}, want: 24},
		{name: "extra network interfaces take slots", instance: func(in *metadata.Instance) { in.NetworkInterfaces = 3 }, want: 24},
		{name: "NVMe instance store takes slots", instance: func(in *metadata.Instance) { in.Type = "m5d.xlarge" }, nvmeStore: 1, want: 25},
		{name: "instance store count unavailable", nvmeStore: 0, storeErr: errors.New("no sysfs"), want: 26},
		{name: "dedicated type ignores interfaces", instance: func(in *metadata.Instance) {
			in.Type = "m7i.large"
			in.NetworkInterfaces = 4
		}, want: 31},
		{name: "xen: 39 besides the root volume", instance: func(in *metadata.Instance) { in.Type = "m4.xlarge" }, want: 39},
		{name: "xen instance store from the mappings", instance: func(in *metadata.Instance) {
			in.Type = "c3.large"
			in.BlockDeviceMappings["ephemeral0"] = "sdb"
			in.BlockDeviceMappings["ephemeral1"] = "sdc"
		}, want: 37},
		{name: "no mappings known (Kubernetes metadata): root only", instance: func(in *metadata.Instance) { in.BlockDeviceMappings = nil }, want: 26},
		{name: "reserved attachments replace the mapping count", instance: func(in *metadata.Instance) {
			in.BlockDeviceMappings["ebs1"] = "/dev/sdb"
		}, cfg: func(c *Config) { c.ReservedVolumeAttachments = 5 }, want: 22},
		{name: "reserved zero", cfg: func(c *Config) { c.ReservedVolumeAttachments = 0 }, want: 27},
		{name: "explicit limit wins", cfg: func(c *Config) { c.VolumeAttachLimit = 7 }, want: 7},
		{name: "never below one", instance: func(in *metadata.Instance) { in.NetworkInterfaces = 40 }, want: 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeOS()
			f.nvmeStore = tc.nvmeStore
			f.failOn["InstanceStoreVolumes"] = tc.storeErr
			in := testInstance()
			if tc.instance != nil {
				tc.instance(in)
			}
			cfg := Config{Metadata: staticMetadata(in), Mounter: f, ReservedVolumeAttachments: -1}
			if tc.cfg != nil {
				tc.cfg(&cfg)
			}
			s, err := New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			resp, err := s.NodeGetInfo(context.Background(), &csi.NodeGetInfoRequest{})
			if err != nil {
				t.Fatal(err)
			}
			if resp.NodeId != in.ID || resp.MaxVolumesPerNode != tc.want {
				t.Fatalf("NodeGetInfo = %s, %d; want %s, %d", resp.NodeId, resp.MaxVolumesPerNode, in.ID, tc.want)
			}
			segs := resp.AccessibleTopology.GetSegments()
			if len(segs) != 2 || segs[ZoneTopologyKey] != in.Zone || segs[OSTopologyKey] != "linux" {
				t.Fatalf("topology = %v", segs)
			}
			if _, ok := segs["topology.k8s.aws/zone-id"]; ok {
				t.Fatal("zone ID must not be a node topology key")
			}
		})
	}
}

// TestInvalidRequests checks that every malformed request is refused with
// InvalidArgument before the OS is touched.
func TestInvalidRequests(t *testing.T) {
	ctx := context.Background()
	type call func(s *Service) error
	stage := func(mut func(r *csi.NodeStageVolumeRequest)) call {
		return func(s *Service) error {
			r := stageReq(mountCap("ext4"))
			mut(r)
			_, err := s.NodeStageVolume(ctx, r)
			return err
		}
	}
	publish := func(mut func(r *csi.NodePublishVolumeRequest)) call {
		return func(s *Service) error {
			r := publishReq(mountCap("ext4"))
			mut(r)
			_, err := s.NodePublishVolume(ctx, r)
			return err
		}
	}
	tests := map[string]call{
		"stage: no volume ID":      stage(func(r *csi.NodeStageVolumeRequest) { r.VolumeId = "" }),
		"stage: not a volume ID":   stage(func(r *csi.NodeStageVolumeRequest) { r.VolumeId = "i-0123456789abcdef0" }),
		"stage: path in volume ID": stage(func(r *csi.NodeStageVolumeRequest) { r.VolumeId = "vol-../../etc" }),
		"stage: no staging path":   stage(func(r *csi.NodeStageVolumeRequest) { r.StagingTargetPath = "" }),
		"stage: relative path":     stage(func(r *csi.NodeStageVolumeRequest) { r.StagingTargetPath = "var/lib/kubelet/x" }),
		"stage: path with ..":      stage(func(r *csi.NodeStageVolumeRequest) { r.StagingTargetPath = kubeletDir + "/../../etc" }),
		"stage: no capability":     stage(func(r *csi.NodeStageVolumeRequest) { r.VolumeCapability = nil }),
		"stage: no access type":    stage(func(r *csi.NodeStageVolumeRequest) { r.VolumeCapability.AccessType = nil }),
		"stage: no access mode":    stage(func(r *csi.NodeStageVolumeRequest) { r.VolumeCapability.AccessMode = nil }),
		"stage: read-only many": stage(func(r *csi.NodeStageVolumeRequest) {
			withMode(r.VolumeCapability, csi.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY)
		}),
		"stage: multi-attach mount": stage(func(r *csi.NodeStageVolumeRequest) {
			withMode(r.VolumeCapability, csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER)
		}),
		"stage: multi-node single writer block": stage(func(r *csi.NodeStageVolumeRequest) {
			r.VolumeCapability = withMode(blockCap(), csi.VolumeCapability_AccessMode_MULTI_NODE_SINGLE_WRITER)
		}),
		"publish: read-only many mount": publish(func(r *csi.NodePublishVolumeRequest) {
			withMode(r.VolumeCapability, csi.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY)
		}),
		"stage: unsupported fs": stage(func(r *csi.NodeStageVolumeRequest) { r.VolumeCapability = mountCap("btrfs") }),
		"stage: unsupported fs (vc)": stage(func(r *csi.NodeStageVolumeRequest) {
			r.VolumeCapability = mountCap("")
			r.VolumeContext = map[string]string{"fsType": "ntfs"}
		}),
		"stage: bad block size": stage(func(r *csi.NodeStageVolumeRequest) { r.VolumeContext = map[string]string{"blockSize": "3000"} }),
		"stage: option for other fs": stage(func(r *csi.NodeStageVolumeRequest) {
			r.VolumeCapability = mountCap("xfs")
			r.VolumeContext = map[string]string{"bytesPerInode": "4096"}
		}),
		"unstage: no volume ID": func(s *Service) error {
			_, err := s.NodeUnstageVolume(ctx, &csi.NodeUnstageVolumeRequest{StagingTargetPath: staging})
			return err
		},
		"unstage: relative path": func(s *Service) error {
			_, err := s.NodeUnstageVolume(ctx, &csi.NodeUnstageVolumeRequest{VolumeId: volID, StagingTargetPath: "globalmount"})
			return err
		},
		"publish: bad volume ID":       publish(func(r *csi.NodePublishVolumeRequest) { r.VolumeId = "vol-" }),
		"publish: no target":           publish(func(r *csi.NodePublishVolumeRequest) { r.TargetPath = "" }),
		"publish: target with ..":      publish(func(r *csi.NodePublishVolumeRequest) { r.TargetPath = kubeletDir + "/pods/../../../root" }),
		"publish: mount needs staging": publish(func(r *csi.NodePublishVolumeRequest) { r.StagingTargetPath = "" }),
		"publish: no capability":       publish(func(r *csi.NodePublishVolumeRequest) { r.VolumeCapability = nil }),
		"publish: bad access mode": publish(func(r *csi.NodePublishVolumeRequest) {
			withMode(r.VolumeCapability, csi.VolumeCapability_AccessMode_UNKNOWN)
		}),
		"unpublish: no target": func(s *Service) error {
			_, err := s.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: volID})
			return err
		},
		"unpublish: bad volume ID": func(s *Service) error {
			_, err := s.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: "snap-1", TargetPath: target})
			return err
		},
		"expand: no volume path": func(s *Service) error {
			_, err := s.NodeExpandVolume(ctx, &csi.NodeExpandVolumeRequest{VolumeId: volID})
			return err
		},
		"expand: relative staging path": func(s *Service) error {
			_, err := s.NodeExpandVolume(ctx, &csi.NodeExpandVolumeRequest{VolumeId: volID, VolumePath: target, StagingTargetPath: "./x"})
			return err
		},
		"expand: bad capability": func(s *Service) error {
			_, err := s.NodeExpandVolume(ctx, &csi.NodeExpandVolumeRequest{VolumeId: volID, VolumePath: target,
				VolumeCapability: &csi.VolumeCapability{AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER}}})
			return err
		},
		"stats: no volume ID": func(s *Service) error {
			_, err := s.NodeGetVolumeStats(ctx, &csi.NodeGetVolumeStatsRequest{VolumePath: target})
			return err
		},
		"stats: no volume path": func(s *Service) error {
			_, err := s.NodeGetVolumeStats(ctx, &csi.NodeGetVolumeStatsRequest{VolumeId: volID})
			return err
		},
	}
	for name, call := range tests {
		t.Run(name, func(t *testing.T) {
			s, f := newTestService(t)
			published(f)
			f.calls = nil
			wantCode(t, call(s), codes.InvalidArgument)
			if len(f.calls) != 0 {
				t.Fatalf("a refused request touched the OS: %q", f.calls)
			}
		})
	}
}

// TestConcurrentCallsForOneVolumeAreAborted holds a stage inside the OS and
// checks that every other mutating call for the same volume is answered
// Aborted at once, while another volume proceeds.
func TestConcurrentCallsForOneVolumeAreAborted(t *testing.T) {
	s, f := newTestService(t)
	f.addVolume("vol-0fedcba9876543210", "/dev/nvme2n1", gib)
	f.findEntered = make(chan struct{})
	f.findRelease = make(chan struct{})
	ctx := context.Background()

	first := make(chan error, 1)
	go func() {
		_, err := s.NodeStageVolume(ctx, stageReq(mountCap("ext4")))
		first <- err
	}()
	<-f.findEntered // the first stage now holds the volume

	_, err := s.NodeStageVolume(ctx, stageReq(mountCap("ext4")))
	wantCode(t, err, codes.Aborted)
	_, err = s.NodeUnstageVolume(ctx, &csi.NodeUnstageVolumeRequest{VolumeId: volID, StagingTargetPath: staging})
	wantCode(t, err, codes.Aborted)
	_, err = s.NodePublishVolume(ctx, publishReq(mountCap("ext4")))
	wantCode(t, err, codes.Aborted)
	_, err = s.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: volID, TargetPath: target})
	wantCode(t, err, codes.Aborted)
	_, err = s.NodeExpandVolume(ctx, &csi.NodeExpandVolumeRequest{VolumeId: volID, VolumePath: target})
	wantCode(t, err, codes.Aborted)

	other := make(chan error, 1)
	go func() {
		r := stageReq(mountCap("ext4"))
		r.VolumeId = "vol-0fedcba9876543210"
		r.StagingTargetPath = filepath.Join(kubeletDir, "plugins", "other", "globalmount")
		_, err := s.NodeStageVolume(ctx, r)
		other <- err
	}()
	<-f.findEntered // another volume is not blocked by the first
	close(f.findRelease)
	wantCode(t, <-first, codes.OK)
	wantCode(t, <-other, codes.OK)

	// With the first stage done, the volume is free again.
	f.findEntered = nil
	_, err = s.NodeStageVolume(ctx, stageReq(mountCap("ext4")))
	wantCode(t, err, codes.OK)
}
