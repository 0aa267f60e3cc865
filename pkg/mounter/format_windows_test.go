package mounter

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/diskplane/diskplane/pkg/emulator/winhost"
)

// stageNew finds volID's disk and formats and mounts it at stageDir.
func stageNew(m *windowsMounter) error {
	device, err := m.FindDevice(context.Background(), volID, "")
	if err != nil {
		return err
	}
	if err := m.MakeDir(stageDir); err != nil {
		return err
	}
	return m.FormatAndMount(volID, device, stageDir, "ntfs", nil, nil)
}

// TestPartitionInterrupted: a stage that partitioned a new disk and did not
// get to format it — the format failed, timed out after the host did it,
// or the new volume arrived later than the stage waited — is finished by
// the kubelet's retry and by a restarted plugin, with one format. Before,
// every later stage refused the RAW volume until someone ran Clear-Disk. A
// copy of the disk at that moment (a snapshot) carries no record of the
// partition, and is refused with the command that clears it.
func TestPartitionInterrupted(t *testing.T) {
	tests := []struct {
		name  string
		fault func(h *winhost.Host)
	}{
		{"format fails", func(h *winhost.Host) { h.FailNext(winhost.Fault{Op: "FormatVolume"}) }},
		{"format times out after formatting", func(h *winhost.Host) { h.FailNext(winhost.Fault{Op: "FormatVolume", After: true}) }},
		{"partition times out after partitioning", func(h *winhost.Host) { h.FailNext(winhost.Fault{Op: "CreateBasicPartition", After: true}) }},
		{"the volume arrives after the stage gave up", func(h *winhost.Host) { h.DelayNewVolumes(newVolumeLooks + 1) }},
	}
	for _, tc := range tests {
		for _, restart := range []bool{false, true} {
			name := tc.name + ", retried"
			if restart {
				name = tc.name + ", plugin restarted"
			}
			t.Run(name, func(t *testing.T) {
				m, h, src := newWindows(t)
				src.Attach(winhost.Attached{VolumeID: volID, SizeBytes: gib})
				tc.fault(h)
				if err := stageNew(m); err == nil {
					t.Fatal("the interrupted stage succeeded")
				}
				h.DelayNewVolumes(0)
				const copyID = "vol-0c0c0c0c0c0c0c0c0"
				must(t, h.CopyDisk(volID, copyID))
				if restart {
					m = restarted(t, m)
				}
				must(t, stageNew(m))
				if n := formats(t, h, volID); n != 1 {
					t.Fatalf("the volume was formatted %d times, want once", n)
				}
				if exists, err := m.PathExists(m.partitionedRecord(volID)); err != nil || exists {
					t.Fatalf("the record of the partition is still there (%v)", err)
				}

				src.Attach(winhost.Attached{VolumeID: copyID, SizeBytes: gib})
				device, err := m.FindDevice(context.Background(), copyID, "")
				must(t, err)
				copyStage := stageDir + "-copy"
				must(t, m.MakeDir(copyStage))
				err = m.FormatAndMount(copyID, device, copyStage, "ntfs", nil, nil)
				if formats(t, h, copyID) == 0 {
					if !errors.Is(err, ErrFilesystemMismatch) || !strings.Contains(err.Error(), "Clear-Disk") {
						t.Fatalf("staging the copy of an unformatted partition = %v, want a refusal naming Clear-Disk", err)
					}
				} else if err != nil {
					t.Fatalf("staging the copy of a formatted volume: %v", err)
				}
			})
		}
	}
}

// TestNewVolumeArrivesLate: the volume of a new partition that Windows
// announces a moment late is waited for, not refused.
func TestNewVolumeArrivesLate(t *testing.T) {
	m, h, src := newWindows(t)
	src.Attach(winhost.Attached{VolumeID: volID, SizeBytes: gib})
	h.DelayNewVolumes(2)
	must(t, stageNew(m))
	if n := formats(t, h, volID); n != 1 {
		t.Fatalf("formatted %d times", n)
	}
}

// restarted is m as a restarted plugin has it: a new mounter over the same
// host.
func restarted(t *testing.T, m *windowsMounter) *windowsMounter {
	t.Helper()
	again, err := New(Options{CSIProxy: m.host, DeviceWait: m.wait, StateDir: stateDir})
	must(t, err)
	return again.(*windowsMounter)
}

// TestDiskNumberReusedBeforePartitioning: Windows hands the number of a
// disk that went to the next disk that arrives. A volume detached after
// its disk was found, and another attached in its place, must not have the
// other's disk partitioned and formatted in its name.
func TestDiskNumberReusedBeforePartitioning(t *testing.T) {
	m, h, src := newWindows(t)
	src.Attach(winhost.Attached{VolumeID: volID, SizeBytes: gib})
	device, err := m.FindDevice(context.Background(), volID, "")
	must(t, err)
	src.Detach(volID)
	src.Attach(winhost.Attached{VolumeID: otherID, SizeBytes: gib})
	if got := view(t, h, otherID).Number; diskPath(got) != device {
		t.Fatalf("the other volume is disk %d, want it to have taken %s", got, device)
	}
	must(t, m.MakeDir(stageDir))
	if err := m.FormatAndMount(volID, device, stageDir, "ntfs", nil, nil); !errors.Is(err, ErrWrongDevice) {
		t.Fatalf("FormatAndMount of a disk that is now another volume's = %v, want ErrWrongDevice", err)
	}
	if other := view(t, h, otherID); other.Style != winhost.StyleRaw || len(other.Partitions) != 0 {
		t.Fatalf("the other volume's disk was written: %+v", other.Disk)
	}
}

// TestWholeDiskLinuxContentRefused: a disk that a Linux node formatted
// whole (ext4, xfs, a LUKS header; a Linux volume's snapshot restored into
// a Windows class, say) shows no volume to Windows. Where the plugin can
// read the disk (HostProcess, as here), it is refused, not partitioned and
// formatted NTFS over the data.
func TestWholeDiskLinuxContentRefused(t *testing.T) {
	for _, sig := range []string{"ext4", "xfs", "crypto_LUKS"} {
		t.Run(sig, func(t *testing.T) {
			m, h, src := newWindows(t)
			must(t, h.SetDisk(winhost.Disk{VolumeID: volID, Size: gib, Style: winhost.StyleRaw, Signature: sig}))
			src.Attach(winhost.Attached{VolumeID: volID, SizeBytes: gib})
			if err := stageNew(m); !errors.Is(err, ErrFilesystemMismatch) {
				t.Fatalf("staging a disk holding %s = %v, want ErrFilesystemMismatch", sig, err)
			}
			if d := view(t, h, volID); d.Signature != sig || d.Style != winhost.StyleRaw || len(d.Partitions) != 0 {
				t.Fatalf("the disk was written: %+v", d.Disk)
			}
		})
	}
}
