package winhost

import (
	"bytes"
	"errors"
	"testing"
)

// partitioned brings a data disk online, initialises it and creates its
// basic partition, as csi-proxy's PartitionDisk does.
func partitioned(t *testing.T, h *Host, n uint32) {
	t.Helper()
	must(t, h.SetDiskState(n, true))
	must(t, h.InitializeDisk(n))
	must(t, h.CreateBasicPartition(n))
}

// TestFaults: a fault fails the next call of its operation once, before it
// happens or (After) once it did; new volumes can arrive listings late.
func TestFaults(t *testing.T) {
	h, src := newHost(t, "")
	src.Attach(Attached{VolumeID: dataID, SizeBytes: gib})
	n := numberOf(t, h, dataID)
	h.FailNext(Fault{Op: "InitializeDisk"})
	must(t, h.SetDiskState(n, true))
	if err := h.InitializeDisk(n); !errors.Is(err, ErrInjected) {
		t.Fatalf("InitializeDisk with a fault armed = %v", err)
	}
	if ok, _ := h.IsDiskInitialized(n); ok {
		t.Fatal("a fault without After let the operation happen")
	}
	h.DelayNewVolumes(2)
	partitioned(t, h, n)
	for i := range 2 {
		if vols, err := h.ListVolumesOnDisk(n, 0); err != nil || len(vols) != 0 {
			t.Fatalf("listing %d after the partition: %v, %v; want it late", i, vols, err)
		}
	}
	vols, err := h.ListVolumesOnDisk(n, 0)
	if err != nil || len(vols) != 1 {
		t.Fatalf("the volume did not arrive: %v, %v", vols, err)
	}
	h.FailNext(Fault{Op: "FormatVolume", After: true})
	if err := h.FormatVolume(vols[0]); !errors.Is(err, ErrInjected) {
		t.Fatalf("FormatVolume with an After fault = %v", err)
	}
	if ok, err := h.IsVolumeFormatted(vols[0]); err != nil || !ok {
		t.Fatalf("an After fault kept the format from happening: %v, %v", ok, err)
	}
}

// TestReadDisk: what a plugin with the host's devices reads marks what is
// on the disk: zeros for a new one, a GPT for a partitioned one, an NTFS
// boot sector where a formatted volume begins, and the superblock of what
// a Linux node wrote over a whole disk, which initialising it destroys.
func TestReadDisk(t *testing.T) {
	h, src := newHost(t, "")
	src.Attach(Attached{VolumeID: dataID, SizeBytes: gib})
	n := numberOf(t, h, dataID)
	head := make([]byte, 1<<20)
	must(t, h.ReadDisk(n, 0, head))
	if !bytes.Equal(head, make([]byte, len(head))) {
		t.Fatal("a new disk does not read as zeros")
	}
	partitioned(t, h, n)
	vols, _ := h.ListVolumesOnDisk(n, 0)
	must(t, h.FormatVolume(vols[0]))
	part := make([]byte, 512)
	must(t, h.ReadDisk(n, 0, head))
	must(t, h.ReadDisk(n, 16<<20, part))
	if !bytes.Equal(head[512:520], []byte("EFI PART")) || !bytes.Equal(part[3:11], []byte("NTFS    ")) {
		t.Fatalf("GPT %q at 512, NTFS %q at the volume", head[512:520], part[3:11])
	}
	if err := h.ReadDisk(n, gib-512, make([]byte, 1024)); err == nil {
		t.Fatal("a read past the end succeeded")
	}

	must(t, h.SetDisk(Disk{VolumeID: otherID, Size: gib, Style: StyleRaw, Signature: "ext4"}))
	src.Attach(Attached{VolumeID: otherID, SizeBytes: gib})
	o := numberOf(t, h, otherID)
	must(t, h.ReadDisk(o, 0, head))
	if !bytes.Equal(head[1080:1082], []byte{0x53, 0xef}) {
		t.Fatal("no ext4 superblock where a Linux node wrote one")
	}
	must(t, h.SetDiskState(o, true))
	must(t, h.InitializeDisk(o))
	if d := h.st.Disks[otherID]; d.Signature != "" {
		t.Fatalf("initialising the disk kept %q", d.Signature)
	}
}

// TestRebootAndCopy: a reboot numbers the data disks again in another
// order, keeping mounts; a copy of a disk has its layout with volumes of
// its own.
func TestRebootAndCopy(t *testing.T) {
	h, src := newHost(t, "")
	src.Attach(Attached{VolumeID: dataID, SizeBytes: gib})
	src.Attach(Attached{VolumeID: otherID, SizeBytes: gib})
	a, b := numberOf(t, h, dataID), numberOf(t, h, otherID)
	partitioned(t, h, a)
	must(t, h.Reboot())
	if numberOf(t, h, dataID) != b || numberOf(t, h, otherID) != a {
		t.Fatalf("after a reboot the disks are %d and %d, want them swapped from %d and %d",
			numberOf(t, h, dataID), numberOf(t, h, otherID), a, b)
	}
	const copyID = "vol-0c0c0c0c0c0c0c0c0"
	must(t, h.CopyDisk(dataID, copyID))
	if err := h.CopyDisk(dataID, copyID); err == nil {
		t.Fatal("copying over a volume the host knows succeeded")
	}
	orig, copied := h.st.Disks[dataID], h.st.Disks[copyID]
	if copied.Style != StyleGPT || len(copied.Partitions) != len(orig.Partitions) || copied.Online ||
		copied.Partitions[1].Volume.ID == orig.Partitions[1].Volume.ID {
		t.Fatalf("copy %+v of %+v", copied, orig)
	}
}
