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
// (a private directory).
func serve(t *testing.T, prefix string) *winhost.Host {
	t.Helper()
	src := &winhost.StaticSource{}
	src.Attach(winhost.Attached{VolumeID: "vol-0b0000000000000b0", SizeBytes: 30 * gib, Boot: true})
	src.Attach(winhost.Attached{VolumeID: volID, SizeBytes: gib})
	h, err := winhost.New(winhost.Config{Source: src, Root: testutil.TempDir(t)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ready, done := make(chan struct{}), make(chan error, 1)
	go func() {
		done <- csiproxyapi.Serve(ctx, h, csiproxyapi.Options{PipePrefix: prefix}, func() { close(ready) })
	}()
	select {
	case <-ready:
	case err := <-done:
		cancel()
		t.Fatalf("serve: %v", err)
	}
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	return h
}

func TestPipePathIsCSIProxys(t *testing.T) {
	for _, group := range []string{"disk", "volume", "filesystem"} {
		want := client.PipePath(group, apiversion.NewVersionOrPanic("v1"))
		if got := csiproxy.PipePath("", group); got != want {
			t.Errorf("PipePath(%s) = %q, want csi-proxy's %q", group, got, want)
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
	if !errors.Is(err, csiproxy.ErrNotServed) || !strings.Contains(err.Error(), csiproxy.PipePath(prefix, "disk")) {
		t.Fatalf("Connect without csi-proxy = %v, want ErrNotServed naming the disk pipe", err)
	}

	// A csi-proxy that serves disk and volume v1 but not filesystem v1.
	h := serve(t, prefix)
	other := pipePrefix(t)
	for _, group := range []string{"disk", "volume"} {
		l, err := winio.ListenPipe(csiproxy.PipePath(other, group), nil)
		must(t, err)
		s := csiproxyapi.Groups(h, nil)[group]
		go func() { _ = s.Serve(l) }()
		t.Cleanup(s.Stop)
	}
	_, err = csiproxy.Connect(context.Background(), csiproxy.PipeOptions{Prefix: other, Wait: 1500 * time.Millisecond})
	if !errors.Is(err, csiproxy.ErrNotServed) || !strings.Contains(err.Error(), csiproxy.PipePath(other, "filesystem")) {
		t.Fatalf("Connect without the filesystem group = %v, want ErrNotServed naming its pipe", err)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
