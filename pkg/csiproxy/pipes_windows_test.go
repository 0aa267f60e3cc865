package csiproxy_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/Microsoft/go-winio"
	"github.com/kubernetes-csi/csi-proxy/client"
	"github.com/kubernetes-csi/csi-proxy/client/apiversion"

	"github.com/diskplane/diskplane/pkg/csiproxy"
	"github.com/diskplane/diskplane/pkg/emulator/csiproxyapi"
	"github.com/diskplane/diskplane/pkg/emulator/winhost"
	"github.com/diskplane/diskplane/pkg/testutil"
)

const (
	gib   = int64(1) << 30
	volID = "vol-0123456789abcdef0"
)

// pipePrefix is a prefix no other test uses, so packages tested at once do
// not meet on one pipe.
func pipePrefix(t *testing.T) string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return "diskplane-test-" + hex.EncodeToString(b)
}

// serve runs the emulated csi-proxy under prefix over a host with the boot
// disk and volID attached, with the working directory C:\var\lib\kubelet
// (a private directory), as the newest release.
func serve(t *testing.T, prefix string) *winhost.Host {
	t.Helper()
	h := newHost(t)
	t.Cleanup(serveAs(t, h, prefix, csiproxyapi.DefaultRelease))
	return h
}

func newHost(t *testing.T) *winhost.Host {
	t.Helper()
	src := &winhost.StaticSource{}
	src.Attach(winhost.Attached{VolumeID: "vol-0b0000000000000b0", SizeBytes: 30 * gib, Boot: true})
	src.Attach(winhost.Attached{VolumeID: volID, SizeBytes: gib})
	h, err := winhost.New(winhost.Config{Source: src, Root: testutil.TempDir(t)})
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// serveAs serves h under prefix as release until the returned function is
// called.
func serveAs(t *testing.T, h *winhost.Host, prefix string, release csiproxyapi.Release) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ready, done := make(chan struct{}), make(chan error, 1)
	go func() {
		done <- csiproxyapi.Serve(ctx, h, csiproxyapi.Options{PipePrefix: prefix, Release: release}, func() { close(ready) })
	}()
	select {
	case <-ready:
	case err := <-done:
		cancel()
		t.Fatalf("serve: %v", err)
	}
	return func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	}
}

func TestPipePathIsCSIProxys(t *testing.T) {
	for _, api := range []csiproxyapi.API{{Group: "disk", Version: "v1"}, {Group: "volume", Version: "v1"}, {Group: "filesystem", Version: "v1"}, {Group: "volume", Version: "v2alpha1"}} {
		want := client.PipePath(api.Group, apiversion.NewVersionOrPanic(api.Version))
		if got := csiproxy.PipePath("", api.Group, api.Version); got != want {
			t.Errorf("PipePath(%s, %s) = %q, want csi-proxy's %q", api.Group, api.Version, got, want)
		}
	}
}

// TestOverPipes stages and unstages a volume through the pipes: every call
// of the Host crosses a named pipe to the emulated csi-proxy and back.
func TestOverPipes(t *testing.T) {
	prefix := pipePrefix(t)
	serve(t, prefix)
	ctx := context.Background()
	host, err := csiproxy.Connect(ctx, csiproxy.PipeOptions{Prefix: prefix, Wait: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer host.Close()

	ids, err := host.ListDiskIDs(ctx)
	must(t, err)
	disk := uint32(99)
	for n, id := range ids {
		if strings.HasPrefix(id.SerialNumber, "vol0123456789abcdef0") {
			disk = n
		}
	}
	if disk == 99 {
		t.Fatalf("no disk of %s in %v", volID, ids)
	}
	must(t, host.SetDiskOnline(ctx, disk, true))
	must(t, host.PartitionDisk(ctx, disk))
	must(t, host.PartitionDisk(ctx, disk)) // csi-proxy adds no second partition
	volumes, err := host.VolumesOnDisk(ctx, disk)
	must(t, err)
	if len(volumes) != 1 {
		t.Fatalf("volumes = %v, want one", volumes)
	}
	must(t, host.FormatVolume(ctx, volumes[0]))
	if ok, err := host.IsVolumeFormatted(ctx, volumes[0]); err != nil || !ok {
		t.Fatalf("formatted = %v, %v", ok, err)
	}
	staging := `C:\var\lib\kubelet\plugins\kubernetes.io\csi\ebs.csi.diskplane.io\abc\globalmount`
	target := `C:\var\lib\kubelet\pods\p1\volumes\kubernetes.io~csi\pvc-1\mount`
	must(t, host.Mkdir(ctx, staging))
	must(t, host.MountVolume(ctx, volumes[0], staging))
	must(t, host.Mkdir(ctx, `C:\var\lib\kubelet\pods\p1\volumes\kubernetes.io~csi\pvc-1`))
	must(t, host.CreateSymlink(ctx, staging, target))
	if is, err := host.IsSymlink(ctx, target); err != nil || !is {
		t.Fatalf("IsSymlink = %v, %v", is, err)
	}
	if v, err := host.VolumeAt(ctx, target); err != nil || v != volumes[0] {
		t.Fatalf("VolumeAt(target) = %q, %v", v, err)
	}
	if n, err := host.DiskOfVolume(ctx, volumes[0]); err != nil || n != disk {
		t.Fatalf("DiskOfVolume = %d, %v", n, err)
	}
	if total, used, err := host.VolumeStats(ctx, volumes[0]); err != nil || total <= used {
		t.Fatalf("VolumeStats = %d, %d, %v", total, used, err)
	}
	must(t, host.Rescan(ctx))
	must(t, host.ResizeVolume(ctx, volumes[0]))
	if size, err := host.DiskSize(ctx, disk); err != nil || size != gib {
		t.Fatalf("DiskSize = %d, %v", size, err)
	}
	must(t, host.Rmdir(ctx, target))
	must(t, host.UnmountVolume(ctx, volumes[0], staging))
	must(t, host.SetDiskOnline(ctx, disk, false))
	if exists, err := host.PathExists(ctx, target); err != nil || exists {
		t.Fatalf("target exists=%v, %v", exists, err)
	}
	// csi-proxy's filesystem API stays within the kubelet's directory.
	if err := host.Mkdir(ctx, `C:\Windows\System32\evil`); err == nil || !strings.Contains(err.Error(), "working directories") {
		t.Fatalf("Mkdir outside the kubelet's directory = %v", err)
	}
}

// TestConnectRefuses checks the start-up check: no csi-proxy, or one
// without an API group Diskplane needs, is refused with a message naming
// the pipe.
func TestConnectRefuses(t *testing.T) {
	prefix := pipePrefix(t)
	_, err := csiproxy.Connect(context.Background(), csiproxy.PipeOptions{Prefix: prefix, Wait: 1500 * time.Millisecond})
	if !errors.Is(err, csiproxy.ErrNotServed) || !strings.Contains(err.Error(), csiproxy.PipePath(prefix, "disk", "v1")) {
		t.Fatalf("Connect without csi-proxy = %v, want ErrNotServed naming the disk pipe", err)
	}

	// A csi-proxy that serves disk and volume v1 but not filesystem v1.
	h := serve(t, prefix)
	other := pipePrefix(t)
	servers := csiproxyapi.Groups(h, csiproxyapi.DefaultRelease, nil)
	for _, group := range []string{"disk", "volume"} {
		l, err := winio.ListenPipe(csiproxy.PipePath(other, group, "v1"), nil)
		must(t, err)
		s := servers[csiproxyapi.API{Group: group, Version: "v1"}]
		go func() { _ = s.Serve(l) }()
		t.Cleanup(s.Stop)
	}
	_, err = csiproxy.Connect(context.Background(), csiproxy.PipeOptions{Prefix: other, Wait: 1500 * time.Millisecond})
	if !errors.Is(err, csiproxy.ErrNotServed) || !strings.Contains(err.Error(), csiproxy.PipePath(other, "filesystem", "v1")) {
		t.Fatalf("Connect without the filesystem group = %v, want ErrNotServed naming its pipe", err)
	}
}

// TestConnectDatesCSIProxy checks that Connect refuses a csi-proxy older
// than v1.1.0 (no volume API v2alpha1), naming the release it needs, and
// takes the oldest release supported (the newest is every other test's).
func TestConnectDatesCSIProxy(t *testing.T) {
	for _, version := range []string{"v1.0.2", csiproxy.MinVersion} {
		release, err := csiproxyapi.ReleaseOf(version)
		must(t, err)
		t.Run(release.Version, func(t *testing.T) {
			prefix := pipePrefix(t)
			stop := serveAs(t, newHost(t), prefix, release)
			defer stop()
			host, err := csiproxy.Connect(context.Background(), csiproxy.PipeOptions{Prefix: prefix, Wait: 1500 * time.Millisecond})
			if release.VolumeV2Alpha1 {
				must(t, err)
				must(t, host.Close())
				return
			}
			if !errors.Is(err, csiproxy.ErrNotServed) || !strings.Contains(err.Error(), "older than v1.1.0") ||
				!strings.Contains(err.Error(), "csi-proxy "+csiproxy.MinVersion+" or later") {
				t.Fatalf("Connect to csi-proxy %s = %v, want ErrNotServed saying it is older than v1.1.0 and %s is needed",
					release.Version, err, csiproxy.MinVersion)
			}
		})
	}
}

// TestCheckSeesCSIProxyStopAndReturn checks Check (the plugin's /healthz):
// it fails while csi-proxy is gone and succeeds again once it is back,
// over the same connection.
func TestCheckSeesCSIProxyStopAndReturn(t *testing.T) {
	prefix := pipePrefix(t)
	h := newHost(t)
	stop := serveAs(t, h, prefix, csiproxyapi.DefaultRelease)
	ctx := context.Background()
	host, err := csiproxy.Connect(ctx, csiproxy.PipeOptions{Prefix: prefix, Wait: 10 * time.Second})
	must(t, err)
	defer host.Close()
	check := func() error {
		ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
		return host.Check(ctx)
	}
	must(t, check())
	stop()
	if err := check(); err == nil || !strings.Contains(err.Error(), "does not answer") {
		t.Fatalf("Check with csi-proxy stopped = %v, want an error saying it does not answer", err)
	}
	stop = serveAs(t, h, prefix, csiproxyapi.DefaultRelease)
	defer stop()
	deadline := time.Now().Add(20 * time.Second)
	for err := check(); err != nil; err = check() {
		if time.Now().After(deadline) {
			t.Fatalf("Check after csi-proxy came back = %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
