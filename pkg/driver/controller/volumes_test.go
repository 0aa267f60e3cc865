package controller

import (
	"fmt"
	"maps"
	"strings"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"

	"github.com/diskplane/diskplane/pkg/cloud"
	"github.com/diskplane/diskplane/pkg/driver/parameters"
	"github.com/diskplane/diskplane/pkg/emulator/emulatortest"
	"github.com/diskplane/diskplane/pkg/emulator/kms"
	"github.com/diskplane/diskplane/pkg/emulator/model"
)

func TestCreateVolume(t *testing.T) {
	h := newHarness(t, emulatortest.Options{KMS: kms.Config{Keys: []kms.KeySpec{{ID: "test"}}}}, Options{
		ExtraTags: map[string]string{"team": "storage"}, ClusterID: "test-cluster",
	})
	block := blockCap(csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER)
	tests := []struct {
		name     string
		req      *csi.CreateVolumeRequest
		wantGiB  int64
		wantZone string
		check    func(t *testing.T, v model.Volume, resp *csi.Volume)
	}{
		{
			name: "gp3 by default, with every driver tag", req: func() *csi.CreateVolumeRequest {
				r := createReq("pvc-plain", 10, "us-east-1a")
				r.Parameters = map[string]string{parameters.KeyPVCName: "data", parameters.KeyPVCNamespace: "shop", parameters.KeyPVName: "pvc-plain"}
				return r
			}(),
			wantGiB: 10, wantZone: "us-east-1a",
			check: func(t *testing.T, v model.Volume, _ *csi.Volume) {
				want := map[string]string{
					cloud.TagVolumeName: "pvc-plain", testDriverName + "/cluster": "true",
					"kubernetes.io/cluster/test-cluster": "owned", "team": "storage",
					parameters.TagCreatedForPVCName: "data", parameters.TagCreatedForPVCNamespace: "shop", parameters.TagCreatedForPVName: "pvc-plain",
					testDriverName + "/layout": "ext4",
				}
				if v.Type != "gp3" || !maps.Equal(v.Tags, want) {
					t.Fatalf("type %s tags %v, want gp3 and %v", v.Type, v.Tags, want)
				}
			},
		},
		{
			name: "io2 with IOPS", req: withParams(createReq("pvc-io2", 20, ""), map[string]string{"type": "io2", "iops": "5000"}),
			wantGiB: 20,
			check:   wantVolume(func(v model.Volume) bool { return v.Type == "io2" && v.Iops == 5000 }),
		},
		{
			name: "gp3 performance, keys in any case", req: withParams(createReq("pvc-gp3", 10, ""), map[string]string{"TYPE": "gp3", "Iops": "4000", "THROUGHPUT": "250"}),
			wantGiB: 10,
			check:   wantVolume(func(v model.Volume) bool { return v.Iops == 4000 && v.Throughput == 250 }),
		},
		{
			name: "iops per GiB", req: withParams(createReq("pvc-pergb", 100, ""), map[string]string{"type": "io1", "iopsPerGB": "10"}),
			wantGiB: 100,
			check:   wantVolume(func(v model.Volume) bool { return v.Type == "io1" && v.Iops == 1000 }),
		},
		{
			name: "encrypted with a KMS key", req: withParams(createReq("pvc-enc", 10, ""), map[string]string{"encrypted": "true", "kmsKeyId": "arn:aws:kms:us-east-1:123456789012:key/test"}),
			wantGiB: 10,
			check:   wantVolume(func(v model.Volume) bool { return v.Encrypted && strings.Contains(v.KmsKeyID, "key/test") }),
		},
		{
			name: "no capacity gives the type minimum or the default", req: func() *csi.CreateVolumeRequest {
				r := withParams(createReq("pvc-st1", 0, ""), map[string]string{"type": "st1"})
				r.CapacityRange = nil
				return r
			}(), wantGiB: 125,
		},
		{
			name: "one byte rounds up to one GiB", req: func() *csi.CreateVolumeRequest {
				r := createReq("pvc-tiny", 0, "")
				r.CapacityRange = &csi.CapacityRange{RequiredBytes: 1}
				return r
			}(), wantGiB: 1,
		},
		{
			name: "preferred zone wins", req: func() *csi.CreateVolumeRequest {
				r := createReq("pvc-pref", 5, "us-east-1a")
				r.AccessibilityRequirements.Requisite = append(r.AccessibilityRequirements.Requisite, zoneSeg("us-east-1b"))
				r.AccessibilityRequirements.Preferred = []*csi.Topology{zoneSeg("us-east-1b")}
				return r
			}(), wantGiB: 5, wantZone: "us-east-1b",
		},
		{
			name: "zone ID", req: func() *csi.CreateVolumeRequest {
				r := createReq("pvc-zoneid", 5, "")
				r.AccessibilityRequirements = &csi.TopologyRequirement{Requisite: []*csi.Topology{{Segments: map[string]string{TopologyZoneIDKey: "use1-az4"}}}}
				return r
			}(), wantGiB: 5, wantZone: "us-east-1c",
		},
		{
			name: "multi-attach io2 block", req: func() *csi.CreateVolumeRequest {
				r := withParams(createReq("pvc-multi", 8, ""), map[string]string{"type": "io2", "iops": "1000"})
				r.VolumeCapabilities = []*csi.VolumeCapability{block}
				return r
			}(), wantGiB: 8,
			check: wantVolume(func(v model.Volume) bool { return v.MultiAttach }),
		},
		{
			name: "format options and fs type in the volume context", req: func() *csi.CreateVolumeRequest {
				r := withParams(createReq("pvc-fmt", 10, ""), map[string]string{"blockSize": "1024", "inodeSize": "512", "ext4BigAlloc": "true", "ext4ClusterSize": "16384"})
				r.VolumeCapabilities = []*csi.VolumeCapability{mountCap(csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER, "ext4")}
				return r
			}(), wantGiB: 10,
			check: func(t *testing.T, _ model.Volume, resp *csi.Volume) {
				want := map[string]string{"fsType": "ext4", "blockSize": "1024", "inodeSize": "512", "ext4BigAlloc": "true", "ext4ClusterSize": "16384"}
				if !maps.Equal(resp.GetVolumeContext(), want) {
					t.Fatalf("volume context %v, want %v", resp.GetVolumeContext(), want)
				}
			},
		},
		{
			name: "VolumeAttributesClass at creation wins", req: func() *csi.CreateVolumeRequest {
				r := withParams(createReq("pvc-vac", 20, ""), map[string]string{"iops": "3000", "tagSpecification_1": "tier=bronze"})
				r.MutableParameters = map[string]string{"iops": "6000", "throughput": "300", "tagSpecification_1": "tier=gold"}
				return r
			}(), wantGiB: 20,
			check: wantVolume(func(v model.Volume) bool { return v.Iops == 6000 && v.Throughput == 300 && v.Tags["tier"] == "gold" }),
		},
		{
			name: "VolumeAttributesClass at creation removes tags", req: func() *csi.CreateVolumeRequest {
				r := withParams(createReq("pvc-vac-del", 1, ""), map[string]string{"tagSpecification_1": "tier=bronze"})
				r.MutableParameters = map[string]string{"tagDeletion_1": "tier", "tagDeletion_2": "team", "tagSpecification_1": "level=gold"}
				return r
			}(), wantGiB: 1,
			check: wantVolume(func(v model.Volume) bool {
				_, tier := v.Tags["tier"]
				_, team := v.Tags["team"]
				return !tier && !team && v.Tags["level"] == "gold" && v.Tags[cloud.TagVolumeName] == "pvc-vac-del"
			}),
		},
		{
			name: "tag templates", req: withParams(createReq("pvc-tmpl", 1, ""), map[string]string{
				"tagSpecification_1": "owner={{ .PVCNamespace | toUpper }}/{{ .PVCName }}", parameters.KeyPVCName: "db", parameters.KeyPVCNamespace: "shop"}),
			wantGiB: 1,
			check:   wantVolume(func(v model.Volume) bool { return v.Tags["owner"] == "SHOP/db" }),
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			resp := h.createVolume(t, tc.req)
			if resp.GetCapacityBytes() != tc.wantGiB*GiB {
				t.Fatalf("capacity %d, want %d GiB", resp.GetCapacityBytes(), tc.wantGiB)
			}
			v := h.volume(t, resp.GetVolumeId())
			if int64(v.Size) != tc.wantGiB {
				t.Fatalf("the emulator's volume is %d GiB, want %d", v.Size, tc.wantGiB)
			}
			topo := resp.GetAccessibleTopology()
			if len(topo) != 1 || topo[0].GetSegments()[TopologyZoneKey] != v.Zone {
				t.Fatalf("topology %v, want the volume's zone %s", topo, v.Zone)
			}
			if tc.wantZone != "" && v.Zone != tc.wantZone {
				t.Fatalf("zone %s, want %s", v.Zone, tc.wantZone)
			}
			if tc.check != nil {
				tc.check(t, v, resp)
			}
		})
	}
}

func withParams(r *csi.CreateVolumeRequest, params map[string]string) *csi.CreateVolumeRequest {
	r.Parameters = params
	return r
}

func wantVolume(ok func(model.Volume) bool) func(*testing.T, model.Volume, *csi.Volume) {
	return func(t *testing.T, v model.Volume, _ *csi.Volume) {
		t.Helper()
		if !ok(v) {
			t.Fatalf("the emulator's volume is not as asked: %+v", v)
		}
	}
}

// TestCreateVolumeRejectsBadInput checks that every malformed request fails
// with the code the CSI spec names and makes no change in the cloud.
func TestCreateVolumeRejectsBadInput(t *testing.T) {
	h := newHarness(t, emulatortest.Options{}, Options{})
	fs := func(mode csi.VolumeCapability_AccessMode_Mode) []*csi.VolumeCapability {
		return []*csi.VolumeCapability{mountCap(mode, "")}
	}
	tests := []struct {
		name   string
		mutate func(r *csi.CreateVolumeRequest)
		code   codes.Code
		msg    string
	}{
		{name: "no name", mutate: func(r *csi.CreateVolumeRequest) { r.Name = "" }, code: codes.InvalidArgument, msg: "volume name is missing"},
		{name: "name too long", mutate: func(r *csi.CreateVolumeRequest) { r.Name = strings.Repeat("n", 257) }, code: codes.InvalidArgument, msg: "longer than 256"},
		{name: "no capabilities", mutate: func(r *csi.CreateVolumeRequest) { r.VolumeCapabilities = nil }, code: codes.InvalidArgument, msg: "capabilities are missing"},
		{name: "multi-node filesystem", mutate: func(r *csi.CreateVolumeRequest) {
			r.VolumeCapabilities = fs(csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER)
		}, code: codes.InvalidArgument, msg: "needs a raw block volume"},
		{name: "multi-node single writer", mutate: func(r *csi.CreateVolumeRequest) {
			r.VolumeCapabilities = []*csi.VolumeCapability{blockCap(csi.VolumeCapability_AccessMode_MULTI_NODE_SINGLE_WRITER)}
		}, code: codes.InvalidArgument, msg: "not supported"},
		{name: "multi-node block of gp3", mutate: func(r *csi.CreateVolumeRequest) {
			r.VolumeCapabilities = []*csi.VolumeCapability{blockCap(csi.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY)}
		}, code: codes.InvalidArgument, msg: "needs volume type io2"},
		{name: "unsupported filesystem", mutate: func(r *csi.CreateVolumeRequest) {
			r.VolumeCapabilities = []*csi.VolumeCapability{mountCap(csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER, "zfs")}
		}, code: codes.InvalidArgument, msg: "zfs"},
		{name: "unknown parameter", mutate: func(r *csi.CreateVolumeRequest) { r.Parameters = map[string]string{"sizeGB": "1"} }, code: codes.InvalidArgument, msg: `parameter "sizeGB"`},
		{name: "bad value", mutate: func(r *csi.CreateVolumeRequest) { r.Parameters = map[string]string{"iops": "lots"} }, code: codes.InvalidArgument, msg: `parameter "iops"`},
		{name: "unknown mutable parameter", mutate: func(r *csi.CreateVolumeRequest) {
			r.MutableParameters = map[string]string{"XXX_FakeKey": "XXX_FakeValue"}
		}, code: codes.InvalidArgument, msg: "XXX_FakeKey"},
		{name: "reserved tag", mutate: func(r *csi.CreateVolumeRequest) {
			r.Parameters = map[string]string{"tagSpecification_1": "CSIVolumeName=other"}
		}, code: codes.InvalidArgument, msg: "reserved"},
		{name: "unsafe template", mutate: func(r *csi.CreateVolumeRequest) {
			r.Parameters = map[string]string{"tagSpecification_1": `x={{ printf "%999999999d" 1 }}`}
		}, code: codes.InvalidArgument, msg: "printf"},
		{name: "bad format option", mutate: func(r *csi.CreateVolumeRequest) {
			r.Parameters = map[string]string{"bytesPerInode": "1024"}
			r.VolumeCapabilities = []*csi.VolumeCapability{mountCap(csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER, "xfs")}
		}, code: codes.InvalidArgument, msg: "bytesPerInode cannot be used with filesystem type xfs"},
		{name: "negative capacity", mutate: func(r *csi.CreateVolumeRequest) { r.CapacityRange = &csi.CapacityRange{RequiredBytes: -1} }, code: codes.InvalidArgument},
		{name: "required above limit", mutate: func(r *csi.CreateVolumeRequest) {
			r.CapacityRange = &csi.CapacityRange{RequiredBytes: 2 * GiB, LimitBytes: GiB}
		}, code: codes.InvalidArgument},
		{name: "no whole GiB in range", mutate: func(r *csi.CreateVolumeRequest) {
			r.CapacityRange = &csi.CapacityRange{RequiredBytes: GiB + 1, LimitBytes: 2*GiB - 1}
		}, code: codes.OutOfRange, msg: "whole number of GiB"},
		{name: "above the type's maximum", mutate: func(r *csi.CreateVolumeRequest) {
			r.CapacityRange = &csi.CapacityRange{RequiredBytes: 16385 * GiB}
			r.Parameters = map[string]string{"type": "gp2"}
		}, code: codes.OutOfRange, msg: "16384 GiB maximum of volume type gp2"},
		{name: "limit below the type's minimum", mutate: func(r *csi.CreateVolumeRequest) {
			r.CapacityRange = &csi.CapacityRange{LimitBytes: 10 * GiB}
			r.Parameters = map[string]string{"type": "sc1"}
		}, code: codes.OutOfRange},
		{name: "empty snapshot source", mutate: func(r *csi.CreateVolumeRequest) {
			r.VolumeContentSource = &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Snapshot{Snapshot: &csi.VolumeContentSource_SnapshotSource{}}}
		}, code: codes.InvalidArgument, msg: "source snapshot ID is missing"},
		{name: "empty content source", mutate: func(r *csi.CreateVolumeRequest) {
			r.VolumeContentSource = &csi.VolumeContentSource{}
		}, code: codes.InvalidArgument, msg: "neither a snapshot nor a volume"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			req := createReq("pvc-bad", 10, "")
			tc.mutate(req)
			_, err := h.svc.CreateVolume(h.ctx(), req)
			wantCode(t, err, tc.code, tc.msg)
		})
	}
	if n := h.mutatingCalls(); n != 0 {
		t.Fatalf("bad requests made %d changing EC2 calls, want none", n)
	}
	if vols := h.volumes(); len(vols) != 0 {
		t.Fatalf("bad requests created volumes: %+v", vols)
	}
}

func TestCreateVolumeIsIdempotent(t *testing.T) {
	h := newHarness(t, emulatortest.Options{}, Options{})
	describes := h.env.Calls("DescribeVolumes")
	first := h.createVolume(t, createReq("pvc-same", 10, "us-east-1b"))
	// The first create lists the named volumes (no lookup of a name the
	// listing lacks), and looks once to find the new volume available (the
	// emulator's changes are instant here).
	if n := h.env.Calls("DescribeVolumes") - describes; n != 2 {
		t.Errorf("creating a volume made %d DescribeVolumes calls, want 2", n)
	}
	describes = h.env.Calls("DescribeVolumes")
	again := h.createVolume(t, createReq("pvc-same", 10, "us-east-1b"))
	if again.GetVolumeId() != first.GetVolumeId() || again.GetCapacityBytes() != first.GetCapacityBytes() {
		t.Fatalf("retry gave %v, first %v", again, first)
	}
	// The retry sends the same ClientToken, and EC2 answers with the
	// volume, available: nothing to ask.
	if n := h.env.Calls("DescribeVolumes") - describes; n != 0 {
		t.Errorf("creating an existing volume again made %d DescribeVolumes calls, want none", n)
	}
	if vols := h.volumes(); len(vols) != 1 {
		t.Fatalf("%d volumes after the retry, want the first one alone: %+v", len(vols), vols)
	}

	single := withParams(createReq("pvc-io2-same", 10, "us-east-1b"), map[string]string{"type": "io2", "iops": "500"})
	single.VolumeCapabilities = []*csi.VolumeCapability{blockCap(csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER)}
	h.createVolume(t, single)
	snap := h.snapshot(t, "snap-same", first.GetVolumeId(), nil)

	tests := []struct {
		name string
		req  *csi.CreateVolumeRequest
		msg  string
	}{
		{name: "other size", req: func() *csi.CreateVolumeRequest {
			r := createReq("pvc-same", 20, "us-east-1b")
			r.CapacityRange.LimitBytes = 20 * GiB
			return r
		}(), msg: "size 10 GiB"},
		{name: "other type", req: withParams(createReq("pvc-same", 10, "us-east-1b"), map[string]string{"type": "gp2"}), msg: "type gp3, not gp2"},
		{name: "other zone", req: createReq("pvc-same", 10, "us-east-1c"), msg: "zone us-east-1b"},
		{name: "other source", req: func() *csi.CreateVolumeRequest {
			r := createReq("pvc-same", 10, "us-east-1b")
			r.VolumeContentSource = &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Volume{Volume: &csi.VolumeContentSource_VolumeSource{VolumeId: first.GetVolumeId()}}}
			return r
		}(), msg: "not cloned"},
		{name: "other snapshot", req: func() *csi.CreateVolumeRequest {
			r := createReq("pvc-same", 10, "us-east-1b")
			r.VolumeContentSource = &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Snapshot{Snapshot: &csi.VolumeContentSource_SnapshotSource{SnapshotId: snap.GetSnapshotId()}}}
			return r
		}(), msg: "not restored from the requested snapshot"},
		{name: "encryption asked for", req: withParams(createReq("pvc-same", 10, "us-east-1b"), map[string]string{"encrypted": "true"}), msg: "not encrypted"},
		{name: "multi-attach asked for", req: func() *csi.CreateVolumeRequest {
			r := withParams(createReq("pvc-io2-same", 10, "us-east-1b"), map[string]string{"type": "io2", "iops": "500"})
			r.VolumeCapabilities = []*csi.VolumeCapability{blockCap(csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER)}
			return r
		}(), msg: "multi-attach setting differs"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := h.svc.CreateVolume(h.ctx(), tc.req)
			wantCode(t, err, codes.AlreadyExists, tc.msg)
		})
	}
	if vols := h.volumes(); len(vols) != 2 {
		t.Fatalf("%d volumes, want the 2 first created", len(vols))
	}
}

func TestDeleteVolume(t *testing.T) {
	h := newHarness(t, emulatortest.Options{}, Options{})
	vol := h.createVolume(t, createReq("pvc-del", 1, h.env.Zone()))
	node := h.env.LocalInstance().ID

	_, err := h.svc.DeleteVolume(h.ctx(), &csi.DeleteVolumeRequest{})
	wantCode(t, err, codes.InvalidArgument, "volume ID is missing")

	// An attached volume cannot be deleted.
	if _, err := h.svc.ControllerPublishVolume(h.ctx(), &csi.ControllerPublishVolumeRequest{VolumeId: vol.VolumeId, NodeId: node, VolumeCapability: rwo}); err != nil {
		t.Fatal(err)
	}
	_, err = h.svc.DeleteVolume(h.ctx(), &csi.DeleteVolumeRequest{VolumeId: vol.VolumeId})
	wantCode(t, err, codes.FailedPrecondition, vol.VolumeId)
	if _, err := h.svc.ControllerUnpublishVolume(h.ctx(), &csi.ControllerUnpublishVolumeRequest{VolumeId: vol.VolumeId, NodeId: node}); err != nil {
		t.Fatal(err)
	}

	for i := range 3 { // the second and third find nothing to delete: still success
		if _, err := h.svc.DeleteVolume(h.ctx(), &csi.DeleteVolumeRequest{VolumeId: vol.VolumeId}); err != nil {
			t.Fatalf("delete #%d: %v", i+1, err)
		}
	}
	for _, id := range []string{"vol-0123456789abcdef0", "fake-vol-id"} {
		if _, err := h.svc.DeleteVolume(h.ctx(), &csi.DeleteVolumeRequest{VolumeId: id}); err != nil {
			t.Fatalf("delete of unknown volume %s: %v, want success", id, err)
		}
	}
	eventually(t, "the volume to be gone", func() bool { return len(h.volumes()) == 0 })
}

// TestCreateVolumeEveryType creates a volume for every type at
// its smallest size without a capacity range limit, which the cloud must accept.
func TestCreateVolumeEveryType(t *testing.T) {
	h := newHarness(t, emulatortest.Options{}, Options{})
	for typ, bounds := range sizeLimits {
		t.Run(string(typ), func(t *testing.T) {
			params := map[string]string{"type": string(typ)}
			if typ == cloud.VolumeTypeIO1 || typ == cloud.VolumeTypeIO2 {
				params["iops"] = "100"
			}
			vol := h.createVolume(t, withParams(createReq(fmt.Sprintf("pvc-%s", typ), bounds.min, ""), params))
			if v := h.volume(t, vol.VolumeId); v.Type != string(typ) || int64(v.Size) != bounds.min {
				t.Fatalf("volume %+v, want %s of %d GiB", v, typ, bounds.min)
			}
		})
	}
}
