package mounter

import (
	"context"
	"errors"
	"io/fs"
	"testing"
	"time"

	"github.com/diskplane/diskplane/pkg/csiproxy"
	"github.com/diskplane/diskplane/pkg/emulator/winhost"
	"github.com/diskplane/diskplane/pkg/testutil"
)

const (
	gib      = int64(1) << 30
	bootID   = "vol-0b0000000000000b0"
	volID    = "vol-0123456789abcdef0"
	otherID  = "vol-0fedcba9876543210"
	stageDir = `c:\var\lib\kubelet\plugins\kubernetes.io\csi\ebs.csi.diskplane.io\abc\globalmount`
	// The kubelet may send forward slashes too.
	targetDir = `c:/var/lib/kubelet/pods/p1/volumes/kubernetes.io~csi/pvc-1/mount`
	stateDir  = `c:\var\lib\kubelet\plugins\ebs.csi.diskplane.io`
)

// newWindows returns the Windows mounter over the csi-proxy library, whose
// host APIs are an emulated host (its drive a private directory) with the
// boot disk attached.
func newWindows(t *testing.T) (*windowsMounter, *winhost.Host, *winhost.StaticSource) {
	t.Helper()
	src := &winhost.StaticSource{}
	src.Attach(winhost.Attached{VolumeID: bootID, SizeBytes: 30 * gib, Boot: true})
	h, err := winhost.New(winhost.Config{Source: src, Root: testutil.TempDir(t)})
	if err != nil {
		t.Fatal(err)
	}
	host, err := csiproxy.NewLibrary(context.Background(), h.HostAPIs())
	if err != nil {
		t.Fatal(err)
	}
	m, err := New(Options{CSIProxy: host, DeviceWait: 3 * time.Second, StateDir: stateDir})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.MakeDir(`c:\var\lib\kubelet\pods\p1\volumes\kubernetes.io~csi\pvc-1`); err != nil {
		t.Fatal(err)
	}
	return m.(*windowsMounter), h, src
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// view returns the host's view of a volume's disk.
func view(t *testing.T, h *winhost.Host, volumeID string) winhost.DiskView {
	t.Helper()
	disks, err := h.Disks()
	must(t, err)
	for _, d := range disks {
		if d.VolumeID == volumeID {
			return d
		}
	}
	t.Fatalf("the host has never seen %s", volumeID)
	return winhost.DiskView{}
}

func formats(t *testing.T, h *winhost.Host, volumeID string) int {
	t.Helper()
	n := 0
	for _, p := range view(t, h, volumeID).Partitions {
		if p.Volume != nil {
			n += p.Volume.Formats
		}
	}
	return n
}

func TestSerialIsVolume(t *testing.T) {
	tests := []struct {
		serial, volumeID string
		want             bool
	}{
		{"vol0123456789abcdef0_00000001.", "vol-0123456789abcdef0", true},
		{"vol0123456789abcdef0_00000001", "vol-0123456789abcdef0", true},
		{"vol0123456789abcdef0", "vol-0123456789abcdef0", true},
		{"VOL0123456789ABCDEF0", "vol-0123456789abcdef0", true},
		{"vol0123456789abcdef0_00000001.", "vol-0123456789abcdef1", false},
		// An old 8-digit ID is the start of a newer 17-digit one: "contains"
		// would find the wrong disk.
		{"vol01234567_00000001.", "vol-0123456789abcdef0", false},
		{"vol0123456789abcdef0_00000001.", "vol-01234567", false},
		{"AWS1234567890ABCDEF0", "vol-0123456789abcdef0", false},
		{"", "vol-0123456789abcdef0", false},
	}
	for _, tc := range tests {
		if got := serialIsVolume(tc.serial, tc.volumeID); got != tc.want {
			t.Errorf("serialIsVolume(%q, %q) = %v, want %v", tc.serial, tc.volumeID, got, tc.want)
		}
	}
}

func TestPaths(t *testing.T) {
	for in, want := range map[string]string{
		`c:/var/lib/kubelet/pods/p1/mount`:  `c:\var\lib\kubelet\pods\p1\mount`,
		`c:\var\lib\kubelet\pods\p1\mount\`: `c:\var\lib\kubelet\pods\p1\mount`,
		`C:\`:                               `C:\`,
	} {
		if got := hostPath(in); got != want {
			t.Errorf("hostPath(%q) = %q, want %q", in, got, want)
		}
	}
	if n, err := diskNumber(diskPath(12)); err != nil || n != 12 {
		t.Errorf("disk number of %s = %d, %v", diskPath(12), n, err)
	}
	for _, bad := range []string{"/dev/nvme1n1", `\\.\PhysicalDrive`, `\\.\PhysicalDriveX`, "3"} {
		if _, err := diskNumber(bad); err == nil {
			t.Errorf("diskNumber(%q) accepted", bad)
		}
	}
}

// TestLifecycle stages, publishes, unstages and stages again a volume, with
// another volume's disk attached that must stay as it is.
func TestLifecycle(t *testing.T) {
	ctx := context.Background()
	m, h, src := newWindows(t)
	src.Attach(winhost.Attached{VolumeID: otherID, SizeBytes: gib})
	go func() {
		time.Sleep(700 * time.Millisecond) // the attachment lands while FindDevice waits
		src.Attach(winhost.Attached{VolumeID: volID, SizeBytes: 2 * gib})
	}()
	device, err := m.FindDevice(ctx, volID, "/dev/xvdba")
	must(t, err)
	must(t, m.VerifyDevice(volID, device))
	if err := m.VerifyDevice(otherID, device); !errors.Is(err, ErrWrongDevice) {
		t.Fatalf("VerifyDevice with another volume = %v, want ErrWrongDevice", err)
	}
	if _, err := m.IsMountPoint(stageDir); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("IsMountPoint of a missing path = %v, want fs.ErrNotExist", err)
	}
	must(t, m.MakeDir(stageDir))
	must(t, m.FormatAndMount(volID, device, stageDir, "ntfs", nil, nil))
	if got, err := m.MountedDevice(stageDir); err != nil || got != device {
		t.Fatalf("MountedDevice(staging) = %q, %v; want %s", got, err, device)
	}
	must(t, m.MakeDir(targetDir))
	must(t, m.BindMount(stageDir, targetDir, []string{"ro"}))
	if mounted, err := m.IsMountPoint(targetDir); err != nil || !mounted {
		t.Fatalf("target published=%v (%v)", mounted, err)
	}
	if got, err := m.MountedDevice(targetDir); err != nil || got != device {
		t.Fatalf("MountedDevice(target) = %q, %v; want %s", got, err, device)
	}
	st, err := m.FilesystemStats(targetDir)
	must(t, err)
	if st.TotalBytes <= 0 || st.UsedBytes <= 0 || st.AvailableBytes != st.TotalBytes-st.UsedBytes || st.TotalInodes != 0 {
		t.Fatalf("stats = %+v", st)
	}
	if need, err := m.NeedResize(device, targetDir); err != nil || need {
		t.Fatalf("NeedResize of a fresh volume = %v, %v", need, err)
	}

	must(t, m.CleanupMountPoint(targetDir))
	must(t, m.CleanupMountPoint(targetDir))
	must(t, m.Unmount(stageDir))
	if online, _ := h.GetDiskState(view(t, h, volID).Number); online {
		t.Fatal("the disk is online after Unmount")
	}
	must(t, m.FormatAndMount(volID, device, stageDir, "ntfs", nil, nil))
	if n := formats(t, h, volID); n != 1 {
		t.Fatalf("the volume was formatted %d times, want once", n)
	}
	other := view(t, h, otherID)
	if other.Online || other.Style != winhost.StyleRaw || len(other.Partitions) != 0 {
		t.Fatalf("the other volume's disk was touched: %+v", other)
	}
}

func TestGrow(t *testing.T) {
	ctx := context.Background()
	m, h, src := newWindows(t)
	src.Attach(winhost.Attached{VolumeID: volID, SizeBytes: gib})
	device, err := m.FindDevice(ctx, volID, "")
	must(t, err)
	must(t, m.MakeDir(stageDir))
	must(t, m.FormatAndMount(volID, device, stageDir, "ntfs", nil, nil))
	before, err := m.FilesystemStats(stageDir)
	must(t, err)

	src.Attach(winhost.Attached{VolumeID: volID, SizeBytes: 3 * gib})
	need, err := m.NeedResize(device, stageDir)
	must(t, err)
	if !need {
		t.Fatal("a volume 2 GiB smaller than its disk needs no resize")
	}
	must(t, m.Resize(device, stageDir))
	after, err := m.FilesystemStats(stageDir)
	must(t, err)
	if after.TotalBytes-before.TotalBytes != 2*gib {
		t.Fatalf("volume grew from %d to %d bytes, want 2 GiB more", before.TotalBytes, after.TotalBytes)
	}
	if size, err := m.DeviceSize(device); err != nil || size != 3*gib {
		t.Fatalf("DeviceSize = %d, %v", size, err)
	}
	if need, err := m.NeedResize(device, stageDir); err != nil || need {
		t.Fatalf("NeedResize after the resize = %v, %v", need, err)
	}
	if n := formats(t, h, volID); n != 1 {
		t.Fatalf("formatted %d times", n)
	}
}

// TestLayoutsRefused checks that a disk with anything but nothing or one
// filesystem on it is refused, and left exactly as it was.
func TestLayoutsRefused(t *testing.T) {
	basic := func(n uint32, offset int64, fsType string) *winhost.Partition {
		return &winhost.Partition{Number: n, Type: winhost.TypeBasic, Offset: offset, Size: 256 << 20,
			Volume: &winhost.Volume{ID: `\\?\Volume{0000000` + string(rune('0'+n)) + `-0000-0000-0000-000000000000}\`, FileSystem: fsType}}
	}
	tests := map[string]winhost.Disk{
		"a partition Windows does not mount": {Style: winhost.StyleGPT, Partitions: []*winhost.Partition{
			{Number: 1, Type: winhost.TypeForeign, Offset: 1 << 20, Size: 512 << 20}}},
		"an MBR with a foreign partition": {Style: winhost.StyleMBR, Partitions: []*winhost.Partition{
			{Number: 1, Type: winhost.TypeForeign, Offset: 1 << 20, Size: 512 << 20}}},
		"a volume without a filesystem": {Style: winhost.StyleGPT, Partitions: []*winhost.Partition{basic(1, 16<<20, "")}},
		"two volumes": {Style: winhost.StyleGPT, Partitions: []*winhost.Partition{
			basic(1, 16<<20, "NTFS"), basic(2, 300<<20, "NTFS")}},
	}
	for name, layout := range tests {
		t.Run(name, func(t *testing.T) {
			m, h, src := newWindows(t)
			layout.VolumeID, layout.Size = volID, gib
			must(t, h.SetDisk(layout))
			src.Attach(winhost.Attached{VolumeID: volID, SizeBytes: gib})
			before := view(t, h, volID)
			device, err := m.FindDevice(context.Background(), volID, "")
			must(t, err)
			must(t, m.MakeDir(stageDir))
			if err := m.FormatAndMount(volID, device, stageDir, "ntfs", nil, nil); !errors.Is(err, ErrFilesystemMismatch) {
				t.Fatalf("FormatAndMount = %v, want ErrFilesystemMismatch", err)
			}
			after := view(t, h, volID)
			if after.Style != before.Style || len(after.Partitions) != len(before.Partitions) || formats(t, h, volID) != 0 {
				t.Fatalf("the disk changed: %+v -> %+v", before.Disk, after.Disk)
			}
			if mounted, _ := m.IsMountPoint(stageDir); mounted {
				t.Fatal("something was mounted")
			}
		})
	}
}

func TestFindDeviceRefusals(t *testing.T) {
	m, h, src := newWindows(t)
	m.wait = 1500 * time.Millisecond
	if _, err := m.FindDevice(context.Background(), volID, ""); !errors.Is(err, ErrDeviceNotFound) {
		t.Fatalf("FindDevice of a volume not attached = %v, want ErrDeviceNotFound", err)
	}
	// Two disks claiming one serial number (a volume and its clone cannot,
	// but a misbehaving host could): no guess.
	twin := &twinHost{Host: mustLibrary(t, h), twinOf: volID}
	src.Attach(winhost.Attached{VolumeID: volID, SizeBytes: gib})
	m.host = twin
	if _, err := m.FindDevice(context.Background(), volID, ""); !errors.Is(err, ErrWrongDevice) {
		t.Fatalf("FindDevice with two matching disks = %v, want ErrWrongDevice", err)
	}
}

func mustLibrary(t *testing.T, h *winhost.Host) csiproxy.Host {
	t.Helper()
	host, err := csiproxy.NewLibrary(context.Background(), h.HostAPIs())
	must(t, err)
	return host
}

// twinHost shows the disk of twinOf twice, as disk 90 too.
type twinHost struct {
	csiproxy.Host
	twinOf string
}

func (t *twinHost) ListDiskIDs(ctx context.Context) (map[uint32]csiproxy.DiskIDs, error) {
	ids, err := t.Host.ListDiskIDs(ctx)
	for _, id := range ids {
		if serialIsVolume(id.SerialNumber, t.twinOf) {
			ids[90] = id
		}
	}
	return ids, err
}

// TestFindDeviceWhileADiskCannotBeOpened checks that the host's list of
// disks failing as a whole (one other disk cannot be opened) is waited
// out, and that a list that keeps failing ends in ErrHostUnavailable, not
// in "no such device", with nothing touched.
func TestFindDeviceWhileADiskCannotBeOpened(t *testing.T) {
	ctx := context.Background()
	m, h, src := newWindows(t)
	src.Attach(winhost.Attached{VolumeID: otherID, SizeBytes: gib})
	src.Attach(winhost.Attached{VolumeID: volID, SizeBytes: gib})
	h.SetUnopenable(otherID, true)
	time.AfterFunc(time.Second, func() { h.SetUnopenable(otherID, false) })
	device, err := m.FindDevice(ctx, volID, "")
	must(t, err)
	must(t, m.VerifyDevice(volID, device))

	h.SetUnopenable(otherID, true)
	if _, err := m.FindDevice(ctx, volID, ""); !errors.Is(err, ErrHostUnavailable) {
		t.Fatalf("FindDevice while a disk cannot be opened = %v, want ErrHostUnavailable", err)
	}
	if err := m.VerifyDevice(volID, device); !errors.Is(err, ErrHostUnavailable) {
		t.Fatalf("VerifyDevice while a disk cannot be opened = %v, want ErrHostUnavailable", err)
	}
	if d := view(t, h, volID); d.Online || d.Style != winhost.StyleRaw {
		t.Fatalf("the disk was touched: %+v", d.Disk)
	}
}

// TestMountWhereMountedByAccessPath checks staging again over a mount
// point the volume still has (a forced re-attach) when csi-proxy is older
// than v1.3 and refuses to add an access path twice: the volume is taken
// as mounted; another volume's mount point is still refused.
func TestMountWhereMountedByAccessPath(t *testing.T) {
	src := &winhost.StaticSource{}
	src.Attach(winhost.Attached{VolumeID: bootID, SizeBytes: 30 * gib, Boot: true})
	src.Attach(winhost.Attached{VolumeID: volID, SizeBytes: gib})
	src.Attach(winhost.Attached{VolumeID: otherID, SizeBytes: gib})
	h, err := winhost.New(winhost.Config{Source: src, Root: testutil.TempDir(t), MountByAccessPath: true})
	must(t, err)
	host, err := csiproxy.NewLibrary(context.Background(), h.HostAPIs())
	must(t, err)
	mm, err := New(Options{CSIProxy: host, DeviceWait: 3 * time.Second, StateDir: stateDir})
	must(t, err)
	m := mm.(*windowsMounter)
	ctx := context.Background()
	device, err := m.FindDevice(ctx, volID, "")
	must(t, err)
	must(t, m.MakeDir(stageDir))
	must(t, m.FormatAndMount(volID, device, stageDir, "ntfs", nil, nil))
	// The volume goes offline with its mount point kept, and comes back.
	n, err := diskNumber(device)
	must(t, err)
	must(t, h.SetDiskState(n, false))
	if mounted, err := m.IsMountPoint(stageDir); err != nil || mounted {
		t.Fatalf("the mount point of an offline volume reads as mounted=%v (%v), want not", mounted, err)
	}
	must(t, m.FormatAndMount(volID, device, stageDir, "ntfs", nil, nil))
	if got, err := m.MountedDevice(stageDir); err != nil || got != device {
		t.Fatalf("MountedDevice(staging) = %q, %v; want %s", got, err, device)
	}
	if f := formats(t, h, volID); f != 1 {
		t.Fatalf("formatted %d times, want once", f)
	}
	other, err := m.FindDevice(ctx, otherID, "")
	must(t, err)
	if err := m.FormatAndMount(otherID, other, stageDir, "ntfs", nil, nil); err == nil {
		t.Fatal("another volume was mounted over the staging path")
	}
}
