//go:build linux

package mounter

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const testVolumeID = "vol-0123456789abcdef0"

// fakeBlockDevices builds, in a private directory, what FindDevice reads:
// device nodes (plain files whose device numbers a fake stat reports), a
// sysfs tree describing them, and a by-id link directory.
type fakeBlockDevices struct {
	t       *testing.T
	root    string
	devDir  string
	sysDir  string
	linkDir string
	numbers map[string][2]uint32 // device node path -> major, minor
	next    uint32
}

func newFakeBlockDevices(t *testing.T) *fakeBlockDevices {
	root := t.TempDir()
	f := &fakeBlockDevices{t: t, root: root, devDir: filepath.Join(root, "dev"), sysDir: filepath.Join(root, "sys"),
		linkDir: filepath.Join(root, "dev", "disk", "by-id"), numbers: map[string][2]uint32{}}
	for _, d := range []string{f.devDir, f.linkDir, filepath.Join(f.sysDir, "dev", "block"), filepath.Join(f.sysDir, "block")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return f
}

// add creates a device node named name whose sysfs directory holds attrs
// (relative path -> content), and returns the node's path.
func (f *fakeBlockDevices) add(name string, attrs map[string]string) string {
	f.t.Helper()
	f.next++
	node := filepath.Join(f.devDir, name)
	if err := os.WriteFile(node, nil, 0o600); err != nil {
		f.t.Fatal(err)
	}
	f.numbers[node] = [2]uint32{259, f.next}
	sysDev := filepath.Join(f.sysDir, "devices", "virtual", "block", name)
	if err := os.MkdirAll(sysDev, 0o755); err != nil {
		f.t.Fatal(err)
	}
	for rel, content := range attrs {
		p := filepath.Join(sysDev, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			f.t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			f.t.Fatal(err)
		}
	}
	if err := os.Symlink(sysDev, filepath.Join(f.sysDir, "dev", "block", fmt.Sprintf("259:%d", f.next))); err != nil {
		f.t.Fatal(err)
	}
	if _, isPartition := attrs["partition"]; !isPartition {
		if err := os.Symlink(sysDev, filepath.Join(f.sysDir, "block", name)); err != nil {
			f.t.Fatal(err)
		}
	}
	return node
}

// vpdPage80 is a SCSI unit serial number page holding serial.
func vpdPage80(serial string) string {
	return string([]byte{0, 0x80, 0, byte(len(serial))}) + serial
}

// link makes the by-id link of volumeID point at target.
func (f *fakeBlockDevices) link(volumeID, target string) {
	f.t.Helper()
	if err := os.Symlink(target, filepath.Join(f.linkDir, ebsLinkPrefix+serialOf(volumeID))); err != nil {
		f.t.Fatal(err)
	}
}

func (f *fakeBlockDevices) finder(wait time.Duration) *deviceFinder {
	return &deviceFinder{linkDir: f.linkDir, sysDir: f.sysDir, devDir: f.devDir, wait: wait, loops: true,
		statBlock: func(path string) (uint32, uint32, error) {
			n, ok := f.numbers[path]
			if !ok {
				return 0, 0, errors.New("not a block device")
			}
			return n[0], n[1], nil
		}}
}

func TestFindDevice(t *testing.T) {
	tests := []struct {
		name string
		// setup builds the devices and returns the publish-context hint.
		setup   func(f *fakeBlockDevices) string
		want    string // device base name; empty when an error is expected
		wantErr error
		errText string
	}{
		{
			name: "nvme by-id link with matching serial",
			setup: func(f *fakeBlockDevices) string {
				f.link(testVolumeID, f.add("nvme1n1", map[string]string{"device/serial": "vol0123456789abcdef0   \n"}))
				return "/dev/xvdaa"
			},
			want: "nvme1n1",
		},
		{
			name: "stale by-id link to another volume is refused",
			setup: func(f *fakeBlockDevices) string {
				f.link(testVolumeID, f.add("nvme2n1", map[string]string{"device/serial": "vol0ffffffffffffffff"}))
				return ""
			},
			wantErr: ErrWrongDevice, errText: `serial number "vol0ffffffffffffffff"`,
		},
		{
			name: "instance store is refused",
			setup: func(f *fakeBlockDevices) string {
				f.link(testVolumeID, f.add("nvme0n1", map[string]string{"device/serial": "AWS1234567890ABCDEF"}))
				return ""
			},
			wantErr: ErrWrongDevice,
		},
		{
			name: "loop device backed by the volume's file",
			setup: func(f *fakeBlockDevices) string {
				f.link(testVolumeID, f.add("loop7", map[string]string{"loop/backing_file": "/var/lib/ec2-emulator/volumes/" + testVolumeID + ".img\n"}))
				return "/dev/xvdbc"
			},
			want: "loop7",
		},
		{
			name: "loop device backed by another volume's file is refused",
			setup: func(f *fakeBlockDevices) string {
				f.link(testVolumeID, f.add("loop3", map[string]string{"loop/backing_file": "/data/volumes/vol-0aaaaaaaaaaaaaaaa.img"}))
				return ""
			},
			wantErr: ErrWrongDevice, errText: "vol-0aaaaaaaaaaaaaaaa",
		},
		{
			name: "loop device whose file was deleted is refused",
			setup: func(f *fakeBlockDevices) string {
				f.link(testVolumeID, f.add("loop4", map[string]string{"loop/backing_file": "/data/volumes/" + testVolumeID + ".img (deleted)"}))
				return ""
			},
			wantErr: ErrWrongDevice,
		},
		{
			name: "xen device named by the attachment",
			setup: func(f *fakeBlockDevices) string {
				return f.add("xvdf", nil)
			},
			want: "xvdf",
		},
		{
			name: "xen twin: attachment says sdf, kernel calls it xvdf",
			setup: func(f *fakeBlockDevices) string {
				f.add("xvdf", nil)
				return filepath.Join(f.devDir, "sdf")
			},
			want: "xvdf",
		},
		{
			name: "scsi disk without a serial is not trusted by name, not even as a xen twin",
			setup: func(f *fakeBlockDevices) string {
				f.add("sdg", nil)
				return filepath.Join(f.devDir, "xvdg")
			},
			wantErr: ErrWrongDevice, errText: "SCSI device",
		},
		{
			name: "virtio disk without a serial is refused under the attachment's name",
			setup: func(f *fakeBlockDevices) string {
				return f.add("vdb", nil)
			},
			wantErr: ErrWrongDevice, errText: "has no serial number naming volume vol-0123456789abcdef0, and on a KVM cloud",
		},
		{
			name: "virtio disk with a serial of another kind is refused",
			setup: func(f *fakeBlockDevices) string {
				return f.add("vdb", map[string]string{"serial": "QM00005"})
			},
			wantErr: ErrWrongDevice, errText: `serial number "QM00005"`,
		},
		{
			name: "virtio serial: the volume ID with its dash",
			setup: func(f *fakeBlockDevices) string {
				return f.add("vdb", map[string]string{"serial": testVolumeID})
			},
			want: "vdb",
		},
		{
			name: "virtio serial: the volume ID without its dash",
			setup: func(f *fakeBlockDevices) string {
				return f.add("vdc", map[string]string{"serial": serialOf(testVolumeID)})
			},
			want: "vdc",
		},
		{
			name: "virtio serial: the first 20 bytes of the volume ID",
			setup: func(f *fakeBlockDevices) string {
				return f.add("vdd", map[string]string{"serial": testVolumeID[:20]})
			},
			want: "vdd",
		},
		{
			name: "a truncated serial two disks share is refused",
			setup: func(f *fakeBlockDevices) string {
				f.add("vde", map[string]string{"serial": testVolumeID[:20]})
				return f.add("vdf", map[string]string{"serial": testVolumeID[:20]})
			},
			wantErr: ErrWrongDevice, errText: "cannot tell them apart",
		},
		{
			name: "scsi unit serial number (VPD page 0x80)",
			setup: func(f *fakeBlockDevices) string {
				return f.add("sdc", map[string]string{"device/vpd_pg80": vpdPage80(testVolumeID)})
			},
			want: "sdc",
		},
		{
			name: "KVM names scrambled: the attachment's name is another volume's disk, the volume is found by its serial",
			setup: func(f *fakeBlockDevices) string {
				f.add("vdb", map[string]string{"serial": "vol-0bbbbbbbbbbbbbbbb"})
				f.add("vdc", map[string]string{"serial": testVolumeID})
				return filepath.Join(f.devDir, "vdb")
			},
			want: "vdc",
		},
		{
			name: "nvme device without a by-id link (no udev) is found by its serial",
			setup: func(f *fakeBlockDevices) string {
				f.add("nvme5n1", map[string]string{"device/serial": "vol0bbbbbbbbbbbbbbbb"})
				f.add("nvme6n1", map[string]string{"device/serial": serialOf(testVolumeID)})
				return "/dev/xvdbz"
			},
			want: "nvme6n1",
		},
		{
			name: "xen device reached through a link, not under the attachment's name, is refused",
			setup: func(f *fakeBlockDevices) string {
				f.link(testVolumeID, f.add("xvdh", nil))
				return ""
			},
			wantErr: ErrWrongDevice, errText: "not the attachment's device name",
		},
		{
			name: "attachment name pointing at another volume's nvme device falls through to the by-id link",
			setup: func(f *fakeBlockDevices) string {
				other := f.add("nvme3n1", map[string]string{"device/serial": "vol0bbbbbbbbbbbbbbbb"})
				hint := filepath.Join(f.devDir, "xvdba")
				if err := os.Symlink(other, hint); err != nil {
					t.Fatal(err)
				}
				f.link(testVolumeID, f.add("nvme4n1", map[string]string{"device/serial": "vol0123456789abcdef0"}))
				return hint
			},
			want: "nvme4n1",
		},
		{
			name: "partition is refused",
			setup: func(f *fakeBlockDevices) string {
				f.link(testVolumeID, f.add("nvme1n1p1", map[string]string{"partition": "1", "device/serial": "vol0123456789abcdef0"}))
				return ""
			},
			wantErr: ErrWrongDevice, errText: "partition",
		},
		{
			name: "unknown device kind is refused",
			setup: func(f *fakeBlockDevices) string {
				return f.add("dm-0", nil)
			},
			wantErr: ErrWrongDevice,
		},
		{
			name: "path that is not a block device is refused",
			setup: func(f *fakeBlockDevices) string {
				p := filepath.Join(f.devDir, "xvdz")
				if err := os.WriteFile(p, nil, 0o600); err != nil {
					t.Fatal(err)
				}
				return p
			},
			wantErr: ErrWrongDevice, errText: "not a block device",
		},
		{
			name:    "nothing there",
			setup:   func(f *fakeBlockDevices) string { return "/nonexistent/xvdq" },
			wantErr: ErrDeviceNotFound,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeBlockDevices(t)
			hint := tc.setup(f)
			got, err := f.finder(time.Millisecond).Find(context.Background(), testVolumeID, hint)
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) || !strings.Contains(fmt.Sprint(err), tc.errText) {
					t.Fatalf("Find = %q, %v; want %v containing %q", got, err, tc.wantErr, tc.errText)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != filepath.Join(f.devDir, tc.want) {
				t.Fatalf("Find = %q, want %s", got, filepath.Join(f.devDir, tc.want))
			}
		})
	}
}

// TestLoopDevicesOnlyForTheEmulator checks that production discovery,
// without the emulator's option, never takes a loop device for a volume,
// not even one backed by a file named after it.
func TestLoopDevicesOnlyForTheEmulator(t *testing.T) {
	f := newFakeBlockDevices(t)
	f.link(testVolumeID, f.add("loop7", map[string]string{"loop/backing_file": "/var/lib/ec2-emulator/volumes/" + testVolumeID + ".img"}))
	finder := f.finder(time.Millisecond)
	finder.loops = false
	_, err := finder.Find(context.Background(), testVolumeID, "")
	if !errors.Is(err, ErrWrongDevice) || !strings.Contains(err.Error(), "--emulator-loop-devices") {
		t.Fatalf("Find = %v, want ErrWrongDevice naming --emulator-loop-devices", err)
	}
}

// TestFindDeviceWaitsForTheLink checks that a device whose link appears
// while FindDevice is waiting is found.
func TestFindDeviceWaitsForTheLink(t *testing.T) {
	f := newFakeBlockDevices(t)
	dev := f.add("nvme1n1", map[string]string{"device/serial": serialOf(testVolumeID)})
	finder := f.finder(time.Minute)
	linked := make(chan error, 1)
	go func() {
		time.Sleep(2 * devicePollInterval)
		linked <- os.Symlink(dev, filepath.Join(f.linkDir, ebsLinkPrefix+serialOf(testVolumeID)))
	}()
	got, err := finder.Find(context.Background(), testVolumeID, "")
	if linkErr := <-linked; linkErr != nil {
		t.Fatal(linkErr)
	}
	if err != nil || got != dev {
		t.Fatalf("Find = %q, %v; want %s", got, err, dev)
	}
}

func TestFindDeviceStopsWithContext(t *testing.T) {
	f := newFakeBlockDevices(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := f.finder(time.Hour).Find(ctx, testVolumeID, ""); !errors.Is(err, ErrDeviceNotFound) {
		t.Fatalf("Find with a cancelled context = %v, want ErrDeviceNotFound", err)
	}
}

func TestVerifyDevice(t *testing.T) {
	f := newFakeBlockDevices(t)
	nvme := f.add("nvme1n1", map[string]string{"device/serial": serialOf(testVolumeID)})
	xen := f.add("xvdf", nil)
	virtio := f.add("vdb", map[string]string{"serial": "vol0cccccccccccccccc"})
	virtioOwn := f.add("vdc", map[string]string{"serial": testVolumeID})
	virtioBare := f.add("vdd", nil)
	scsi := f.add("sde", map[string]string{"device/vpd_pg80": vpdPage80(serialOf(testVolumeID))})
	finder := f.finder(time.Millisecond)
	if err := finder.Verify(testVolumeID, virtioOwn); err != nil {
		t.Errorf("virtio disk with the volume's serial: %v", err)
	}
	if err := finder.Verify(testVolumeID, scsi); err != nil {
		t.Errorf("SCSI disk with the volume's unit serial: %v", err)
	}
	if err := finder.Verify(testVolumeID, virtioBare); !errors.Is(err, ErrWrongDevice) {
		t.Errorf("virtio disk without a serial: %v, want ErrWrongDevice whatever its name", err)
	}
	if err := finder.Verify(testVolumeID, nvme); err != nil {
		t.Errorf("matching nvme: %v", err)
	}
	if err := finder.Verify("vol-0dddddddddddddddd", nvme); !errors.Is(err, ErrWrongDevice) {
		t.Errorf("nvme of another volume: %v, want ErrWrongDevice", err)
	}
	if err := finder.Verify(testVolumeID, xen); err != nil {
		t.Errorf("xen device in use: %v", err)
	}
	if err := finder.Verify(testVolumeID, virtio); !errors.Is(err, ErrWrongDevice) {
		t.Errorf("virtio disk with another volume's serial: %v, want ErrWrongDevice", err)
	}
}

func TestInstanceStoreVolumes(t *testing.T) {
	sys := t.TempDir()
	for name, model := range map[string]string{
		"nvme0": "Amazon Elastic Block Store              \n",
		"nvme1": "Amazon EC2 NVMe Instance Storage        \n",
		"nvme2": "Amazon EC2 NVMe Instance Storage\n",
	} {
		dir := filepath.Join(sys, "class", "nvme", name)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "model"), []byte(model), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := (&deviceFinder{sysDir: sys}).InstanceStoreVolumes()
	if err != nil || got != 2 {
		t.Fatalf("InstanceStoreVolumes = %d, %v; want 2", got, err)
	}
	got, err = (&deviceFinder{sysDir: t.TempDir()}).InstanceStoreVolumes()
	if err != nil || got != 0 {
		t.Fatalf("InstanceStoreVolumes without NVMe = %d, %v; want 0", got, err)
	}
}
