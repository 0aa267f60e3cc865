package controller

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/diskplane/diskplane/pkg/cloud"
	"github.com/diskplane/diskplane/pkg/emulator/emulatortest"
	"github.com/diskplane/diskplane/pkg/emulator/model"
)

const testDriverName = "ebs.csi.diskplane.io"

// harness is the real controller over the real cloud layer against an
// in-process EC2 emulator.
type harness struct {
	t     *testing.T
	env   *emulatortest.Env
	cloud cloud.Cloud
	svc   *Service
	opts  Options
	// visibility, when set, replaces the test configuration's
	// VisibilityTimeout from the next start on.
	visibility time.Duration
}

// testCloudConfig keeps the cloud layer's waits short: the emulator changes
// state at once unless a test asks for latency.
func testCloudConfig() cloud.Config {
	return cloud.Config{
		BatchMaxDelay:   5 * time.Millisecond,
		PollInterval:    10 * time.Millisecond,
		ColdFirstLook:   10 * time.Millisecond,
		PollMaxInterval: 50 * time.Millisecond,
		// Throttling tests keep their lookups quick too.
		ThrottledPollGrid: 50 * time.Millisecond,
		MaxRetryBackoff:   50 * time.Millisecond,
		// Longer than any eventual consistency a test sets, short enough
		// that a new snapshot name right after start waits little.
		VisibilityTimeout: 1500 * time.Millisecond,
	}
}

// newHarness starts an emulator and a controller service over it.
func newHarness(t *testing.T, emu emulatortest.Options, opts Options) *harness {
	t.Helper()
	h := &harness{t: t, env: emulatortest.Start(t, emu), opts: opts}
	if h.opts.DriverName == "" {
		h.opts.DriverName = testDriverName
	}
	if h.opts.ModifyCoalesceWindow == 0 {
		h.opts.ModifyCoalesceWindow = 20 * time.Millisecond
	}
	h.start()
	return h
}

// start builds a fresh cloud and service, as a restarted controller process would.
func (h *harness) start() {
	h.t.Helper()
	awsCfg := aws.Config{
		Region:       h.env.Region(),
		BaseEndpoint: aws.String(h.env.EC2URL),
		Credentials:  credentials.NewStaticCredentialsProvider("AKIDEMULATOR", "emulator-secret", ""),
	}
	cfg := testCloudConfig()
	if h.visibility != 0 {
		cfg.VisibilityTimeout = h.visibility
	}
	c, err := cloud.NewFromAWSConfig(awsCfg, cfg)
	if err != nil {
		h.t.Fatalf("cloud: %v", err)
	}
	svc, err := New(c, h.opts)
	if err != nil {
		c.Close()
		h.t.Fatalf("controller: %v", err)
	}
	h.cloud, h.svc = c, svc
	h.t.Cleanup(func() {
		svc.Close()
		c.Close()
	})
}

// restart drops the controller (its in-flight set, coalescer and cloud
// caches) and starts a new one against the same emulator.
func (h *harness) restart() {
	h.t.Helper()
	h.svc.Close()
	h.cloud.Close()
	h.start()
}

// ctx is a context bounded like a sidecar's RPC.
func (h *harness) ctx() context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	h.t.Cleanup(cancel)
	return ctx
}

// volumes returns the emulator's data volumes (instances' root volumes left out).
func (h *harness) volumes() []model.Volume {
	var out []model.Volume
	for _, v := range h.env.Cloud().Volumes() {
		if !v.Root {
			out = append(out, v)
		}
	}
	return out
}

// volume returns one volume as the emulator holds it.
func (h *harness) volume(t *testing.T, id string) model.Volume {
	t.Helper()
	for _, v := range h.env.Cloud().Volumes() {
		if v.ID == id {
			return v
		}
	}
	t.Fatalf("the emulator has no volume %s", id)
	return model.Volume{}
}

// mutatingCalls counts the EC2 calls that change something.
func (h *harness) mutatingCalls() int {
	n := 0
	for _, a := range []string{"CreateVolume", "CopyVolumes", "DeleteVolume", "AttachVolume", "DetachVolume",
		"ModifyVolume", "CreateSnapshot", "DeleteSnapshot", "CreateTags", "DeleteTags"} {
		n += h.env.Calls(a)
	}
	return n
}

// createVolume provisions a volume and fails the test on error.
func (h *harness) createVolume(t *testing.T, req *csi.CreateVolumeRequest) *csi.Volume {
	t.Helper()
	resp, err := h.svc.CreateVolume(h.ctx(), req)
	if err != nil {
		t.Fatalf("CreateVolume(%s): %v", req.GetName(), err)
	}
	return resp.GetVolume()
}

// eventually polls cond until it holds, for waiting on background work the
// test cannot join (the deadline only stops a hung test).
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// wantCode checks an RPC's gRPC code and, when given, part of its message.
func wantCode(t *testing.T, err error, code codes.Code, msg string) {
	t.Helper()
	if status.Code(err) != code {
		t.Fatalf("error = %v, want code %v", err, code)
	}
	if msg != "" && !strings.Contains(status.Convert(err).Message(), msg) {
		t.Fatalf("error message %q does not contain %q", status.Convert(err).Message(), msg)
	}
}

// Request builders.

func mountCap(mode csi.VolumeCapability_AccessMode_Mode, fs string) *csi.VolumeCapability {
	return &csi.VolumeCapability{
		AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{FsType: fs}},
		AccessMode: &csi.VolumeCapability_AccessMode{Mode: mode},
	}
}

func blockCap(mode csi.VolumeCapability_AccessMode_Mode) *csi.VolumeCapability {
	return &csi.VolumeCapability{
		AccessType: &csi.VolumeCapability_Block{Block: &csi.VolumeCapability_BlockVolume{}},
		AccessMode: &csi.VolumeCapability_AccessMode{Mode: mode},
	}
}

var rwo = mountCap(csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER, "ext4")

// createReq is a plain CreateVolume request for sizeGiB in zone (empty: any).
func createReq(name string, sizeGiB int64, zone string) *csi.CreateVolumeRequest {
	req := &csi.CreateVolumeRequest{
		Name:               name,
		CapacityRange:      &csi.CapacityRange{RequiredBytes: sizeGiB * GiB},
		VolumeCapabilities: []*csi.VolumeCapability{rwo},
		Parameters:         map[string]string{},
	}
	if zone != "" {
		req.AccessibilityRequirements = &csi.TopologyRequirement{
			Requisite: []*csi.Topology{{Segments: map[string]string{TopologyZoneKey: zone}}},
		}
	}
	return req
}
