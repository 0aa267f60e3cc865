//go:build linux

package mounter

import (
	"cmp"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	mountutils "k8s.io/mount-utils"
	utilexec "k8s.io/utils/exec"
	fakeexec "k8s.io/utils/exec/testing"
)

// blkidResult is one scripted run of blkid: what it prints and how it exits
// (0 found, 2 nothing found or could not open, anything else an error).
type blkidResult struct {
	stdout, stderr string
	exit           int
}

// scriptedExec is a fake exec that answers blkid runs in order from a
// script, mkfs with success, and records every command line it was asked
// to run.
type scriptedExec struct {
	t     *testing.T
	blkid []blkidResult
	ran   [][]string
}

func (s *scriptedExec) exec() utilexec.Interface {
	return &recordingExec{s: s, FakeExec: &fakeexec.FakeExec{}}
}

// recordingExec serves scriptedExec's commands; the embedded FakeExec
// supplies the rest of the interface.
type recordingExec struct {
	*fakeexec.FakeExec
	s *scriptedExec
}

func (r *recordingExec) Command(name string, args ...string) utilexec.Cmd {
	s := r.s
	s.ran = append(s.ran, append([]string{name}, args...))
	cmd := &fakeexec.FakeCmd{Argv: append([]string{name}, args...)}
	switch {
	case name == "blkid":
		if len(s.blkid) == 0 {
			s.t.Fatalf("blkid run once more than scripted: %v", s.ran)
		}
		res := s.blkid[0]
		s.blkid = s.blkid[1:]
		cmd.RunScript = []fakeexec.FakeAction{func() ([]byte, []byte, error) {
			var err error
			if res.exit != 0 {
				err = &fakeexec.FakeExitError{Status: res.exit}
			}
			return []byte(res.stdout), []byte(res.stderr), err
		}}
	case strings.HasPrefix(name, "mkfs."):
		cmd.CombinedOutputScript = []fakeexec.FakeAction{func() ([]byte, []byte, error) { return nil, nil, nil }}
	default:
		s.t.Fatalf("unexpected command %s %v", name, args)
	}
	return cmd
}

// fakeDevice is a regular file standing in for a device: the blank test's
// own read works on it as on a block device.
func fakeDevice(t *testing.T, size int64, nonZeroAt ...int64) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "dev")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Truncate(size); err != nil {
		t.Fatal(err)
	}
	for _, off := range nonZeroAt {
		if _, err := f.WriteAt([]byte{0x5a}, off); err != nil {
			t.Fatal(err)
		}
	}
	return path
}

const openError = "error: /dev/nvme1n1: No such device or address\n"

func TestProbe(t *testing.T) {
	const size = 8 << 20
	tests := []struct {
		name      string
		blkid     blkidResult
		device    func(t *testing.T) string
		want      deviceContent
		wantError string
	}{
		{name: "filesystem", blkid: blkidResult{stdout: "DEVNAME=/dev/x\nUUID=1\nTYPE=ext4\n"}, want: deviceContent{Filesystem: "ext4"}},
		{name: "LUKS", blkid: blkidResult{stdout: "TYPE=crypto_LUKS\nVERSION=2\n"}, want: deviceContent{Filesystem: "crypto_LUKS", Version: "2"}},
		{name: "partition table", blkid: blkidResult{stdout: "PTUUID=ab\nPTTYPE=gpt\n"}, want: deviceContent{PartitionTable: "gpt"}},
		{name: "found but unnamed", blkid: blkidResult{stdout: "USAGE=other\n"}, want: deviceContent{Unrecognised: true}},
		{name: "nothing found, zeros", blkid: blkidResult{exit: 2}, want: deviceContent{}},
		{name: "nothing found, smaller than two windows", blkid: blkidResult{exit: 2},
			device: func(t *testing.T) string { return fakeDevice(t, probeWindow+probeWindow/2) }, want: deviceContent{}},
		{name: "nothing found, data at the start", blkid: blkidResult{exit: 2},
			device: func(t *testing.T) string { return fakeDevice(t, size, 4096) }, want: deviceContent{Unrecognised: true}},
		{name: "nothing found, data at the end", blkid: blkidResult{exit: 2},
			device: func(t *testing.T) string { return fakeDevice(t, size, size-1) }, want: deviceContent{Unrecognised: true}},
		{name: "data in the middle is not looked at", blkid: blkidResult{exit: 2},
			device: func(t *testing.T) string { return fakeDevice(t, size, size/2) }, want: deviceContent{}},
		{name: "could not open: exit 2 with an error", blkid: blkidResult{exit: 2, stderr: openError}, wantError: "No such device or address"},
		{name: "nothing found but the device is gone", blkid: blkidResult{exit: 2},
			device: func(t *testing.T) string { return filepath.Join(t.TempDir(), "gone") }, wantError: "prove it blank"},
		{name: "empty device", blkid: blkidResult{exit: 2},
			device: func(t *testing.T) string { return fakeDevice(t, 0) }, wantError: "no capacity"},
		{name: "ambivalent result", blkid: blkidResult{exit: 8}, wantError: "blkid"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dev := fakeDevice(t, size)
			if tc.device != nil {
				dev = tc.device(t)
			}
			s := &scriptedExec{t: t, blkid: []blkidResult{tc.blkid}}
			got, err := probe(s.exec(), dev)
			if tc.wantError != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantError) {
					t.Fatalf("probe = %v, %v; want an error with %q", got, err, tc.wantError)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("probe = %+v, %v; want %+v", got, err, tc.want)
			}
		})
	}
}

// fakeLoopFinder is a device finder that takes every device for loop
// device 7:9, backed by the file of volume backedBy, as the EC2 emulator
// attaches it: sysfs is a directory of the test's.
func fakeLoopFinder(t *testing.T, backedBy string) *deviceFinder {
	t.Helper()
	sys := t.TempDir()
	loop := filepath.Join(sys, "devices", "virtual", "block", "loop9")
	if err := os.MkdirAll(filepath.Join(loop, "loop"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(loop, "loop", "backing_file"), []byte("/data/volumes/"+backedBy+".img\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(sys, "dev", "block"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(loop, filepath.Join(sys, "dev", "block", "7:9")); err != nil {
		t.Fatal(err)
	}
	return &deviceFinder{sysDir: sys, devDir: "/dev", loops: true,
		statBlock: func(string) (uint32, uint32, error) { return 7, 9, nil }}
}

// TestFormatOnlyWhatTwoProbesFoundBlank drives FormatAndMount with a
// scripted blkid: mkfs runs only when both probes, the one that decides and
// the one right before mkfs, positively found the device blank, and the
// device is still the volume right before mkfs.
func TestFormatOnlyWhatTwoProbesFoundBlank(t *testing.T) {
	nothing := blkidResult{exit: 2}
	tests := []struct {
		name      string
		blkid     []blkidResult
		nonZeroAt []int64
		wantMkfs  bool
		wantMount bool
		wantErr   error // errors.Is target of a refusal; nil means any error
		// backedBy is the volume the device is when mkfs would run; "" is
		// the volume asked for.
		backedBy string
	}{
		{name: "blank twice", blkid: []blkidResult{nothing, nothing}, wantMkfs: true, wantMount: true},
		{name: "open error looks like nothing found", blkid: []blkidResult{{exit: 2, stderr: openError}}},
		{name: "device back with data on the second look", blkid: []blkidResult{nothing, {stdout: "TYPE=ext4\n"}}, wantErr: ErrFilesystemMismatch},
		{name: "open error on the second look", blkid: []blkidResult{nothing, {exit: 2, stderr: openError}}},
		{name: "unrecognised data", blkid: []blkidResult{nothing}, nonZeroAt: []int64{0}, wantErr: ErrFilesystemMismatch},
		{name: "the requested filesystem", blkid: []blkidResult{{stdout: "TYPE=ext4\n"}}, wantMount: true},
		{name: "another filesystem", blkid: []blkidResult{{stdout: "TYPE=xfs\n"}}, wantErr: ErrFilesystemMismatch},
		{name: "partition table", blkid: []blkidResult{{stdout: "PTTYPE=dos\n"}}, wantErr: ErrFilesystemMismatch},
		// The device name went to another volume between finding it and
		// formatting it.
		{name: "another volume's device by then", blkid: []blkidResult{nothing}, backedBy: "vol-0fedcba9876543210", wantErr: ErrWrongDevice},
	}
	const volumeID = "vol-0123456789abcdef0"
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dev := fakeDevice(t, 8<<20, tc.nonZeroAt...)
			s := &scriptedExec{t: t, blkid: tc.blkid}
			fm := mountutils.NewFakeMounter(nil)
			backedBy := cmp.Or(tc.backedBy, volumeID)
			m := &linuxMounter{mounter: fm, exec: s.exec(), devices: fakeLoopFinder(t, backedBy)}
			err := m.FormatAndMount(volumeID, dev, "/stage", "ext4", nil, nil)
			ranMkfs := slices.ContainsFunc(s.ran, func(c []string) bool { return c[0] == "mkfs.ext4" })
			if ranMkfs != tc.wantMkfs {
				t.Fatalf("mkfs ran: %v, want %v (commands: %v)", ranMkfs, tc.wantMkfs, s.ran)
			}
			if len(s.blkid) != 0 {
				t.Fatalf("%d scripted blkid runs left over", len(s.blkid))
			}
			mounted := len(fm.MountPoints) > 0
			switch {
			case tc.wantMount:
				if err != nil || !mounted {
					t.Fatalf("FormatAndMount = %v, mounted %v; want it mounted", err, mounted)
				}
			case err == nil:
				t.Fatal("FormatAndMount succeeded; want a refusal")
			case tc.wantErr != nil && !errors.Is(err, tc.wantErr):
				t.Fatalf("FormatAndMount = %v, want %v", err, tc.wantErr)
			case mounted:
				t.Fatal("mounted after a refusal")
			}
		})
	}
}
