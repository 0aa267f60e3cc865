package winhost

import (
	"errors"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/diskplane/diskplane/pkg/testutil"
)

const (
	bootID  = "vol-0b0000000000000b0"
	dataID  = "vol-0123456789abcdef0"
	otherID = "vol-0fedcba9876543210"
	staging = `C:\var\lib\kubelet\plugins\kubernetes.io\csi\ebs.csi.diskplane.io\abc\globalmount`
	target  = `C:\var\lib\kubelet\pods\p1\volumes\kubernetes.io~csi\pvc-1\mount`
)

// newHost returns a host whose drive is a private directory, with the boot
// volume attached and a state saved in dataDir (empty: in memory).
func newHost(t *testing.T, dataDir string) (*Host, *StaticSource) {
	t.Helper()
	src := &StaticSource{}
	src.Attach(Attached{VolumeID: bootID, SizeBytes: 30 * gib, Boot: true})
	h, err := New(Config{Source: src, DataDir: dataDir, Root: testutil.TempDir(t)})
	if err != nil {
		t.Fatal(err)
	}
	return h, src
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// numberOf returns the disk number of a volume from ListDiskIDs, by its
// serial number.
func numberOf(t *testing.T, h *Host, volumeID string) uint32 {
	t.Helper()
	ids, err := h.ListDiskIDs()
	must(t, err)
	for n, id := range ids {
		if id.SerialNumber == serialNumber(volumeID) {
			return n
		}
	}
	t.Fatalf("no disk has the serial number of %s: %v", volumeID, ids)
	return 0
}

func TestDisksArriveAndLeave(t *testing.T) {
	h, src := newHost(t, "")
	src.Attach(Attached{VolumeID: dataID, SizeBytes: gib})
	src.Attach(Attached{VolumeID: otherID, SizeBytes: 2 * gib})
	ids, err := h.ListDiskIDs()
	must(t, err)
	want := map[uint32]string{0: "vol0b0000000000000b0_00000001.", 1: "vol0123456789abcdef0_00000001.", 2: "vol0fedcba9876543210_00000001."}
	for n, serial := range want {
		if ids[n].SerialNumber != serial {
			t.Errorf("disk %d serial = %q, want %q", n, ids[n].SerialNumber, serial)
		}
	}
	if online, err := h.GetDiskState(1); err != nil || online {
		t.Fatalf("a new disk is online=%v (%v); want offline", online, err)
	}
	if online, err := h.GetDiskState(0); err != nil || !online {
		t.Fatalf("the boot disk is online=%v (%v)", online, err)
	}
	if vols, err := h.GetVolumeIDFromTargetPath(`C:\`); err != nil || vols == "" {
		t.Fatalf("C:\\ is not the boot volume: %q, %v", vols, err)
	}
	src.Detach(dataID)
	src.Attach(Attached{VolumeID: "vol-0aaaaaaaaaaaaaaa0", SizeBytes: gib})
	if n := numberOf(t, h, "vol-0aaaaaaaaaaaaaaa0"); n != 1 {
		t.Fatalf("a new disk got number %d, want the free number 1", n)
	}
	if _, err := h.GetDiskStats(3); !errors.Is(err, ErrNoSuchDisk) {
		t.Fatalf("GetDiskStats(3) = %v, want ErrNoSuchDisk", err)
	}
	if err := h.SetDiskState(0, false); err == nil {
		t.Fatal("the boot disk was taken offline")
	}
}

// stage does what csi-proxy's PartitionDisk, then a format and a mount, do
// for a blank disk; it returns the volume ID.
func stage(t *testing.T, h *Host, disk uint32, path string) string {
	t.Helper()
	must(t, h.SetDiskState(disk, true))
	if ok, err := h.IsDiskInitialized(disk); err != nil || ok {
		t.Fatalf("a blank disk is initialized=%v (%v)", ok, err)
	}
	must(t, h.InitializeDisk(disk))
	if ok, err := h.BasicPartitionsExist(disk); err != nil || ok {
		t.Fatalf("a disk just initialized has partitions=%v (%v)", ok, err)
	}
	must(t, h.CreateBasicPartition(disk))
	vols, err := h.ListVolumesOnDisk(disk, 0)
	must(t, err)
	if len(vols) != 1 {
		t.Fatalf("volumes on a new partition = %v, want one", vols)
	}
	if ok, err := h.IsVolumeFormatted(vols[0]); err != nil || ok {
		t.Fatalf("a new volume is formatted=%v (%v)", ok, err)
	}
	must(t, h.FormatVolume(vols[0]))
	must(t, h.Mkdir(path))
	must(t, h.MountVolume(vols[0], path))
	return vols[0]
}

func TestStagePublishAndBack(t *testing.T) {
	h, src := newHost(t, "")
	src.Attach(Attached{VolumeID: dataID, SizeBytes: gib})
	disk := numberOf(t, h, dataID)
	if err := h.InitializeDisk(disk); err == nil || !strings.Contains(err.Error(), "offline") {
		t.Fatalf("initializing an offline disk = %v, want refused", err)
	}
	vol := stage(t, h, disk, staging)

	if got, err := h.GetVolumeIDFromTargetPath(staging); err != nil || got != vol {
		t.Fatalf("volume at the staging path = %q, %v; want %q", got, err, vol)
	}
	if got, err := h.GetDiskNumberFromVolumeID(vol); err != nil || got != disk {
		t.Fatalf("disk of the volume = %d, %v; want %d", got, err, disk)
	}
	if is, err := h.IsSymlink(staging); err != nil || !is {
		t.Fatalf("IsSymlink(mount point) = %v, %v; want true, as csi-proxy answers", is, err)
	}
	if err := h.MountVolume(vol, staging); err != nil {
		t.Fatalf("mounting again where it is mounted: %v", err)
	}

	must(t, h.Mkdir(`C:\var\lib\kubelet\pods\p1\volumes\kubernetes.io~csi\pvc-1`))
	must(t, h.CreateSymlink(staging, target))
	if err := h.CreateSymlink(staging, target); err == nil {
		t.Fatal("a symlink was made over an existing one")
	}
	if is, err := h.IsSymlink(target); err != nil || !is {
		t.Fatalf("IsSymlink(target) = %v, %v", is, err)
	}
	if got, err := h.GetVolumeIDFromTargetPath(target); err != nil || got != vol {
		t.Fatalf("volume through the symlink = %q, %v; want %q", got, err, vol)
	}
	if total, used, err := h.GetVolumeStats(vol); err != nil || total <= 0 || used <= 0 || used >= total {
		t.Fatalf("stats = %d total, %d used, %v", total, used, err)
	}
	if got, err := h.GetClosestVolumeIDFromTargetPath(target + `\dir\file`); err != nil || got != vol {
		t.Fatalf("closest volume = %q, %v; want %q", got, err, vol)
	}

	must(t, h.Rmdir(target, false))
	if exists, err := h.PathExists(target); err != nil || exists {
		t.Fatalf("target exists=%v after Rmdir (%v)", exists, err)
	}
	must(t, h.UnmountVolume(vol, staging))
	if _, err := h.GetVolumeIDFromTargetPath(staging); !errors.Is(err, ErrNotMountPoint) {
		t.Fatalf("after unmount: %v, want ErrNotMountPoint", err)
	}
	if exists, err := h.PathExists(staging); err != nil || !exists {
		t.Fatalf("the staging directory is gone after unmount (%v)", err)
	}
	must(t, h.SetDiskState(disk, false))
	if vols, err := h.ListVolumesOnDisk(disk, 0); err != nil || len(vols) != 0 {
		t.Fatalf("an offline disk shows volumes %v (%v)", vols, err)
	}
	if _, err := h.IsVolumeFormatted(vol); !errors.Is(err, ErrNoSuchVolume) {
		t.Fatalf("the volume of an offline disk: %v, want ErrNoSuchVolume", err)
	}
}

func TestMountRefusals(t *testing.T) {
	h, src := newHost(t, "")
	src.Attach(Attached{VolumeID: dataID, SizeBytes: gib})
	src.Attach(Attached{VolumeID: otherID, SizeBytes: gib})
	vol := stage(t, h, numberOf(t, h, dataID), staging)
	other := stage(t, h, numberOf(t, h, otherID), `C:\other`)
	if err := h.MountVolume(other, staging); err == nil {
		t.Fatal("a second volume was mounted over the first")
	}
	must(t, h.Mkdir(`C:\full`))
	if err := os.WriteFile(h.local(`C:\full\f`), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := h.MountVolume(vol, `C:\full`); err == nil {
		t.Fatal("a volume was mounted on a directory with files")
	}
	if err := h.MountVolume(vol, `C:\missing`); err == nil {
		t.Fatal("a volume was mounted where no directory is")
	}
	if err := h.UnmountVolume(vol, `C:\full`); !errors.Is(err, ErrNotMountPoint) {
		t.Fatalf("unmounting a plain directory: %v", err)
	}
}

func TestResizeNeedsRescan(t *testing.T) {
	h, src := newHost(t, "")
	src.Attach(Attached{VolumeID: dataID, SizeBytes: gib})
	disk := numberOf(t, h, dataID)
	vol := stage(t, h, disk, staging)
	before, _, err := h.GetVolumeStats(vol)
	must(t, err)

	src.Attach(Attached{VolumeID: dataID, SizeBytes: 2 * gib})
	if size, err := h.GetDiskStats(disk); err != nil || size != gib {
		t.Fatalf("disk size before a rescan = %d (%v), want the old %d", size, err, gib)
	}
	must(t, h.ResizeVolume(vol, 0))
	if total, _, _ := h.GetVolumeStats(vol); total != before {
		t.Fatalf("resize without a rescan grew the volume to %d", total)
	}
	must(t, h.Rescan())
	if size, err := h.GetDiskStats(disk); err != nil || size != 2*gib {
		t.Fatalf("disk size after a rescan = %d (%v)", size, err)
	}
	must(t, h.ResizeVolume(vol, 0))
	after, _, err := h.GetVolumeStats(vol)
	must(t, err)
	if after-before != gib {
		t.Fatalf("volume grew by %d bytes, want %d", after-before, gib)
	}
	must(t, h.ResizeVolume(vol, after+50*mib))
	if total, _, _ := h.GetVolumeStats(vol); total != after {
		t.Fatalf("a growth under 100 MiB was made: %d", total)
	}
}

func TestForeignLayouts(t *testing.T) {
	h, src := newHost(t, "")
	must(t, h.SetDisk(Disk{VolumeID: dataID, Size: gib, Style: StyleGPT, Partitions: []*Partition{
		{Number: 1, Type: TypeForeign, Offset: mib, Size: gib - 2*mib},
	}}))
	src.Attach(Attached{VolumeID: dataID, SizeBytes: gib})
	disk := numberOf(t, h, dataID)
	must(t, h.SetDiskState(disk, true))
	if ok, _ := h.IsDiskInitialized(disk); !ok {
		t.Fatal("a GPT disk is not initialized")
	}
	if ok, _ := h.BasicPartitionsExist(disk); !ok {
		t.Fatal("a foreign partition does not count as a partition")
	}
	if vols, err := h.ListVolumesOnDisk(disk, 0); err != nil || len(vols) != 0 {
		t.Fatalf("a foreign partition has volumes %v (%v)", vols, err)
	}
	if err := h.InitializeDisk(disk); err == nil {
		t.Fatal("an initialized disk was initialized again")
	}
}

func TestStateSurvivesRestartAndDetach(t *testing.T) {
	data := testutil.TempDir(t)
	h, src := newHost(t, data)
	src.Attach(Attached{VolumeID: dataID, SizeBytes: gib})
	vol := stage(t, h, numberOf(t, h, dataID), staging)

	again, err := New(Config{Source: src, DataDir: data, Root: h.cfg.Root})
	must(t, err)
	if got, err := again.GetVolumeIDFromTargetPath(staging); err != nil || got != vol {
		t.Fatalf("after a restart the staging path holds %q (%v), want %q", got, err, vol)
	}
	must(t, again.UnmountVolume(vol, staging))
	src.Detach(dataID)
	disks, err := again.Disks()
	must(t, err)
	if i := slices.IndexFunc(disks, func(d DiskView) bool { return d.VolumeID == dataID }); i < 0 || disks[i].Attached {
		t.Fatalf("detached disk view: %+v", disks)
	}
	src.Attach(Attached{VolumeID: dataID, SizeBytes: gib})
	disk := numberOf(t, again, dataID)
	if online, _ := again.GetDiskState(disk); online {
		t.Fatal("a disk attached again arrived online")
	}
	must(t, again.SetDiskState(disk, true))
	vols, err := again.ListVolumesOnDisk(disk, 0)
	must(t, err)
	if len(vols) != 1 || vols[0] != vol {
		t.Fatalf("volumes after a reattach = %v, want %s", vols, vol)
	}
	if ok, _ := again.IsVolumeFormatted(vol); !ok {
		t.Fatal("the filesystem did not survive a detach")
	}
	views, err := again.Disks()
	must(t, err)
	for _, d := range views {
		if d.VolumeID == dataID && d.Partitions[1].Volume.Formats != 1 {
			t.Fatalf("formats = %d, want 1", d.Partitions[1].Volume.Formats)
		}
	}
}

func TestValidatePath(t *testing.T) {
	for path, ok := range map[string]bool{
		`C:\var\lib\kubelet`:             true,
		`c:\var\lib\kubelet\a b\c~d`:     true,
		`C:/var/lib/kubelet`:             false,
		`\var\lib\kubelet`:               false,
		`\\server\share`:                 false,
		`var\lib`:                        false,
		`C:\var\..\windows`:              false,
		`C:\var\lib\a:b`:                 false,
		`C:\` + strings.Repeat("a", 300): false,
	} {
		if err := ValidatePath(path); (err == nil) != ok {
			t.Errorf("ValidatePath(%q) = %v, want ok=%v", path, err, ok)
		}
	}
}
