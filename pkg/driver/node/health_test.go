package node

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"

	"github.com/diskplane/diskplane/pkg/driver/volumehealth"
	"github.com/diskplane/diskplane/pkg/health"
	"github.com/diskplane/diskplane/pkg/mounter"
)

// healthOS is the fake OS with a health checker that answers what a test
// sets and remembers which paths it was asked about.
type healthOS struct {
	*fakeOS
	report health.Report
	err    error
	asked  [][]string
}

func (h *healthOS) VolumeHealth(_ context.Context, volumeID string, paths []string) (health.Report, error) {
	h.asked = append(h.asked, slices.Clone(paths))
	return h.report, h.err
}

// fsStats are the figures of the fake volume's filesystem.
var fsStats = mounter.Stats{TotalBytes: 1000, AvailableBytes: 600, UsedBytes: 400, TotalInodes: 50, FreeInodes: 45, UsedInodes: 5}

// publishedFS is published with the filesystem's figures known.
func publishedFS(f *healthOS) {
	published(f.fakeOS)
	f.stats[volDev] = fsStats
}

// newHealthService is newTestService over an OS that can tell a volume's health.
func newHealthService(t *testing.T) (*Service, *healthOS) {
	t.Helper()
	f := &healthOS{fakeOS: newFakeOS()}
	f.addVolume(volID, volDev, gib)
	s, err := New(Config{Metadata: staticMetadata(testInstance()), Mounter: f, ReservedVolumeAttachments: -1})
	if err != nil {
		t.Fatal(err)
	}
	return s, f
}

func sickReport() health.Report {
	var r health.Report
	r.Add(health.Inaccessible, "DeviceGone", "the device of volume "+volID+" is gone")
	return r
}

func TestHealthCapabilities(t *testing.T) {
	has := func(s *Service) (condition, volumeHealth bool) {
		resp, err := s.NodeGetCapabilities(context.Background(), &csi.NodeGetCapabilitiesRequest{})
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range resp.GetCapabilities() {
			condition = condition || c.GetRpc().GetType() == volumehealth.NodeVolumeCondition
			volumeHealth = volumeHealth || c.GetRpc().GetType() == csi.NodeServiceCapability_RPC_GET_VOLUME_HEALTH
		}
		return condition, volumeHealth
	}
	withHealth, _ := newHealthService(t)
	if c, v := has(withHealth); !c || !v {
		t.Errorf("an OS that tells health: VOLUME_CONDITION %v, GET_VOLUME_HEALTH %v; want both", c, v)
	}
	without, _ := newTestService(t)
	if c, v := has(without); c || v {
		t.Errorf("an OS that cannot tell health: VOLUME_CONDITION %v, GET_VOLUME_HEALTH %v; want neither", c, v)
	}
	_, err := without.NodeGetVolumeHealth(context.Background(), &csi.NodeGetVolumeHealthRequest{VolumeId: volID})
	wantCode(t, err, codes.Unimplemented)
}

func TestVolumeStatsCondition(t *testing.T) {
	tests := []struct {
		name         string
		setup        func(f *healthOS)
		code         codes.Code
		wantUsage    bool
		wantAbnormal bool
		wantMessage  string
		wantAsked    bool
	}{
		{name: "healthy", setup: publishedFS, wantUsage: true, wantMessage: "healthy", wantAsked: true},
		{name: "abnormal, still measured", setup: func(f *healthOS) { publishedFS(f); f.report = sickReport() },
			wantUsage: true, wantAbnormal: true, wantMessage: "is gone", wantAsked: true},
		{name: "raw block volume", setup: func(f *healthOS) { publishedBlock(f.fakeOS); f.report = sickReport() },
			wantUsage: true, wantAbnormal: true, wantMessage: "is gone", wantAsked: true},
		{name: "corrupted mount: the condition alone", setup: func(f *healthOS) {
			published(f.fakeOS)
			f.corrupted[target] = true
			f.report.Add(health.Inaccessible, "MountCorrupted", "the mount is corrupted")
		}, wantAbnormal: true, wantMessage: "the mount is corrupted", wantAsked: true},
		{name: "corrupted mount whose health cannot be checked", setup: func(f *healthOS) {
			published(f.fakeOS)
			f.corrupted[target] = true
			f.err = errors.New("mount table unreadable")
		}, code: codes.Internal, wantAsked: true},
		{name: "health unreadable: still measured, and said so", setup: func(f *healthOS) {
			publishedFS(f)
			f.err = errors.New("mount table unreadable")
		}, wantUsage: true, wantMessage: "could not be checked: mount table unreadable", wantAsked: true},
		{name: "not mounted: NotFound, no check", setup: func(f *healthOS) { f.paths[target] = "dir" }, code: codes.NotFound},
		{name: "bad path: NotFound, no check", code: codes.NotFound},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, f := newHealthService(t)
			if tc.setup != nil {
				tc.setup(f)
			}
			path := target
			if tc.name == "bad path: NotFound, no check" {
				path = "relative/path"
			}
			resp, err := s.NodeGetVolumeStats(context.Background(), &csi.NodeGetVolumeStatsRequest{VolumeId: volID, VolumePath: path})
			wantCode(t, err, tc.code)
			if asked := len(f.asked) > 0; asked != tc.wantAsked {
				t.Errorf("health checked: %v, want %v", asked, tc.wantAsked)
			} else if asked && !slices.Equal(f.asked[0], []string{target}) {
				t.Errorf("health checked at %v, want [%s]", f.asked[0], target)
			}
			if err != nil {
				return
			}
			if got := len(resp.GetUsage()) > 0; got != tc.wantUsage {
				t.Errorf("usage %v, want some: %v", resp.GetUsage(), tc.wantUsage)
			}
			abnormal, msg, ok := volumehealth.Condition(resp)
			if !ok || abnormal != tc.wantAbnormal || !strings.Contains(msg, tc.wantMessage) {
				t.Errorf("condition %v %q (set: %v), want abnormal %v with %q", abnormal, msg, ok, tc.wantAbnormal, tc.wantMessage)
			}
			if len(f.calls) != 0 {
				t.Errorf("stats changed something: %q", f.calls)
			}
		})
	}
}

func TestNodeGetVolumeHealth(t *testing.T) {
	tests := []struct {
		name      string
		req       *csi.NodeGetVolumeHealthRequest
		checkErr  error
		code      codes.Code
		wantPaths []string
	}{
		{name: "by ID alone", req: &csi.NodeGetVolumeHealthRequest{VolumeId: volID}, wantPaths: nil},
		{name: "with both paths", req: &csi.NodeGetVolumeHealthRequest{VolumeId: volID, VolumePublishPath: target, StagingTargetPath: staging},
			wantPaths: []string{target, staging}},
		{name: "no volume ID", req: &csi.NodeGetVolumeHealthRequest{}, code: codes.InvalidArgument},
		{name: "not an EBS volume ID", req: &csi.NodeGetVolumeHealthRequest{VolumeId: "disk-1"}, code: codes.InvalidArgument},
		{name: "relative path", req: &csi.NodeGetVolumeHealthRequest{VolumeId: volID, StagingTargetPath: "a/b"}, code: codes.InvalidArgument},
		{name: "not on this node", req: &csi.NodeGetVolumeHealthRequest{VolumeId: volID},
			checkErr: fmt.Errorf("volume %s: %w", volID, mounter.ErrNotOnNode), code: codes.NotFound, wantPaths: nil},
		{name: "the check fails", req: &csi.NodeGetVolumeHealthRequest{VolumeId: volID}, checkErr: errors.New("sysfs unreadable"),
			code: codes.Internal, wantPaths: nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, f := newHealthService(t)
			f.report, f.err = sickReport(), tc.checkErr
			resp, err := s.NodeGetVolumeHealth(context.Background(), tc.req)
			wantCode(t, err, tc.code)
			if tc.code == codes.InvalidArgument {
				if len(f.asked) != 0 {
					t.Errorf("a malformed request was checked: %v", f.asked)
				}
				return
			}
			if len(f.asked) != 1 || !slices.Equal(f.asked[0], tc.wantPaths) {
				t.Errorf("checked at %v, want %v", f.asked, tc.wantPaths)
			}
			if err != nil {
				return
			}
			h := resp.GetVolumeHealth()
			if h.GetVolumeId() != volID || len(h.GetHealthStatuses()) != 1 || h.GetHealthStatuses()[0].GetReason() != "DeviceGone" ||
				h.GetHealthStatuses()[0].GetStatus() != csi.VolumeHealthErrorType_INACCESSIBLE {
				t.Errorf("health %v", h)
			}
		})
	}
}
