//go:build linux

package sanity

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	mountutils "k8s.io/mount-utils"

	"github.com/diskplane/diskplane/pkg/cloud"
	"github.com/diskplane/diskplane/pkg/cloud/metadata"
	"github.com/diskplane/diskplane/pkg/driver"
	"github.com/diskplane/diskplane/pkg/driver/controller"
	"github.com/diskplane/diskplane/pkg/driver/node"
	"github.com/diskplane/diskplane/pkg/emulator/emulatortest"
	"github.com/diskplane/diskplane/pkg/emulator/model"
	"github.com/diskplane/diskplane/pkg/mounter"
	"github.com/diskplane/diskplane/pkg/testutil"
)

// driverName is the plugin's default CSI driver name (cmd/diskplane).
const driverName = "ebs.csi.diskplane.io"

// Cloud tuning for an emulator whose state changes are instant: the
// production defaults (a 200 ms batch window, polls from 500 ms up to 5 s, a
// 2 s modify coalesce window) would only make the suite wait. Everything
// else is wired as cmd/diskplane wires it.
var (
	sanityCloudConfig = cloud.Config{
		BatchMaxDelay:   2 * time.Millisecond,
		PollInterval:    10 * time.Millisecond,
		ColdFirstLook:   10 * time.Millisecond,
		PollMaxInterval: 100 * time.Millisecond,
		MaxRetryBackoff: 200 * time.Millisecond,
		// The emulator's reads are consistent here; a new snapshot name
		// right after start waits only this long.
		VisibilityTimeout: 500 * time.Millisecond,
	}
	sanityModifyCoalesceWindow = 10 * time.Millisecond
)

// sanityZones is the emulated region's only zone. csi-sanity plays a
// one-node cluster: many of its specs create a volume without topology and
// then attach it to the node, which works only where every volume is in the
// node's zone. With more zones EC2 would refuse the attachment of a volume
// placed elsewhere (InvalidVolume.ZoneMismatch); a CO passes the node's
// topology when it creates a volume, so it never asks that.
var sanityZones = []model.Zone{{Name: "us-east-1a", ID: "use1-az1"}}

// plugin is Diskplane in all mode, in this process (so -race covers it),
// serving Identity, Controller and Node on one unix socket.
type plugin struct {
	// Endpoint is the CSI endpoint, unix:///….
	Endpoint string
	// Env is the emulated cloud; this host is its local instance.
	Env *emulatortest.Env
	// Dir is a private directory for the suite's staging and target paths.
	Dir string
}

// startPlugin starts an emulator with real loop devices and a plugin over
// it. The plugin finds the cloud through the SDK's standard settings
// (AWS_ENDPOINT_URL_EC2, AWS_REGION, static keys in the environment), which
// the SDK reads when the cloud is built, so each plugin keeps its own
// emulator when the next one is started. The node learns who it is from its
// emulator's IMDS; the endpoint is passed rather than read from
// AWS_EC2_METADATA_SERVICE_ENDPOINT for the same reason. Everything is
// stopped, unmounted and removed when the test ends; a mount the plugin
// left behind is reported as a failure.
func startPlugin(t *testing.T) *plugin {
	t.Helper()
	testutil.RequireRoot(t, "losetup", "mkfs.ext4", "blkid", "resize2fs", "mount", "umount")
	env := emulatortest.Start(t, emulatortest.Options{Devices: true, Zones: sanityZones})
	env.Setenv(t)
	p := &plugin{Env: env, Dir: t.TempDir()}
	t.Cleanup(func() { unmountLeftovers(t, p.Dir) })

	ctx, cancel := context.WithCancel(context.Background())
	c, err := cloud.New(ctx, sanityCloudConfig)
	if err != nil {
		cancel()
		t.Fatalf("cloud: %v", err)
	}
	ctrl, err := controller.New(c, controller.Options{DriverName: driverName, ModifyCoalesceWindow: sanityModifyCoalesceWindow})
	if err != nil {
		cancel()
		c.Close()
		t.Fatalf("controller service: %v", err)
	}
	stopServices := func() { cancel(); ctrl.Close(); c.Close() }
	m, err := mounter.New(mounter.Options{DeviceLinkDir: env.LinkDir, EmulatorLoopDevices: true})
	if err != nil {
		stopServices()
		t.Fatalf("mounter: %v", err)
	}
	nodeSvc, err := node.New(node.Config{
		Metadata: func(ctx context.Context) (*metadata.Instance, error) {
			return metadata.Get(ctx, metadata.Options{Sources: []string{metadata.SourceIMDS}, IMDSEndpoint: env.IMDSURL})
		},
		Mounter:                   m,
		ReservedVolumeAttachments: -1,
	})
	if err != nil {
		stopServices()
		t.Fatalf("node service: %v", err)
	}
	socket := filepath.Join(t.TempDir(), "csi.sock")
	p.Endpoint = "unix://" + socket
	endpoint, err := driver.ParseEndpoint(p.Endpoint)
	if err != nil {
		stopServices()
		t.Fatal(err)
	}
	d, err := driver.New(driver.Config{Name: driverName, Endpoint: endpoint, Controller: ctrl, Node: nodeSvc})
	if err != nil {
		stopServices()
		t.Fatalf("driver: %v", err)
	}
	served := make(chan error, 1)
	go func() { served <- d.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-served; err != nil {
			t.Errorf("plugin stopped with an error: %v", err)
		}
		ctrl.Close()
		c.Close()
	})
	return p
}

// unmountLeftovers unmounts whatever is still mounted under dir, deepest
// first, and fails the test for each: the suite unpublishes and unstages
// every volume it published, so a mount left here is a plugin bug. It runs
// before the emulator's teardown, which could not detach a mounted device.
func unmountLeftovers(t *testing.T, dir string) {
	t.Helper()
	mounts, err := mountsUnder(dir)
	if err != nil {
		t.Errorf("list mounts: %v", err)
		return
	}
	for i := len(mounts) - 1; i >= 0; i-- {
		t.Errorf("%s is still mounted after the suite", mounts[i])
		if err := unix.Unmount(mounts[i], unix.MNT_DETACH); err != nil {
			t.Errorf("unmount %s: %v", mounts[i], err)
		}
	}
}

// mountsUnder lists the mount points at or below dir, in mount order. The
// suite's paths are under t.TempDir, whose names need no mountinfo escapes.
func mountsUnder(dir string) ([]string, error) {
	infos, err := mountutils.ParseMountInfo("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	var out []string
	for _, mi := range infos {
		if mi.MountPoint == dir || strings.HasPrefix(mi.MountPoint, dir+"/") {
			out = append(out, mi.MountPoint)
		}
	}
	return out, nil
}
