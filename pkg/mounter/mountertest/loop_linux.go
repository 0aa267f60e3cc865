//go:build linux

package mountertest

import (
	"bufio"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// Volume is one test volume attached as a loop device.
type Volume struct {
	// ID is the volume ID, vol-….
	ID string
	// File is the sparse file holding the volume's bytes.
	File string
	// Device is the loop device node, /dev/loopN.
	Device string
	// Link is the by-id link naming the volume, pointing at Device.
	Link string

	detached bool
}

// NewVolumeID returns a fresh random volume ID in EC2's long format.
func NewVolumeID(t testing.TB) string {
	t.Helper()
	b := make([]byte, 9)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return "vol-" + hex.EncodeToString(b)[:17]
}

// NewVolume creates a volume of sizeBytes called volumeID: its file under
// dir/volumes, a loop device over it, and its by-id link in linkDir. The
// caller must be root (see testutil.RequireRoot).
func NewVolume(t testing.TB, dir, linkDir, volumeID string, sizeBytes int64) *Volume {
	t.Helper()
	file := volumeFile(dir, volumeID)
	if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(file, sizeBytes); err != nil {
		t.Fatal(err)
	}
	return AttachVolume(t, dir, linkDir, volumeID)
}

// volumeFile is where the bytes of volumeID are kept under dir.
func volumeFile(dir, volumeID string) string {
	return filepath.Join(dir, "volumes", volumeID+".img")
}

// AttachVolume attaches the existing file of volumeID under dir/volumes as
// a loop device with its by-id link in linkDir, as NewVolume does for a new
// one: a copy (CopyVolume) becomes a volume this way.
func AttachVolume(t testing.TB, dir, linkDir, volumeID string) *Volume {
	t.Helper()
	v := &Volume{
		ID:   volumeID,
		File: volumeFile(dir, volumeID),
		Link: filepath.Join(linkDir, "nvme-Amazon_Elastic_Block_Store_"+strings.Replace(volumeID, "-", "", 1)),
	}
	if err := os.MkdirAll(linkDir, 0o755); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("losetup", "--find", "--show", v.File).CombinedOutput()
	if err != nil {
		t.Fatalf("losetup %s: %v: %s", v.File, err, out)
	}
	v.Device = strings.TrimSpace(string(out))
	t.Cleanup(func() { v.Detach(t) })
	if err := os.Symlink(v.Device, v.Link); err != nil {
		t.Fatal(err)
	}
	return v
}

// CopyVolume copies the bytes of v, as they are on its device now, into a
// new file for volumeID under dir/volumes, holes kept, as a snapshot of
// the volume restored would hold them; AttachVolume attaches it. What is
// still in the page cache of a filesystem on v is not copied, as a
// snapshot would not have it either.
func CopyVolume(t testing.TB, v *Volume, dir, volumeID string) {
	t.Helper()
	if err := CopySparse(v.File, volumeFile(dir, volumeID)); err != nil {
		t.Fatalf("copy volume %s: %v", v.ID, err)
	}
}

// CopySparse copies src to a new file dst, only the regions holding data
// (SEEK_DATA/SEEK_HOLE), so that a mostly empty volume stays small.
func CopySparse(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	st, err := in.Stat()
	if err != nil {
		return err
	}
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	defer out.Close()
	if err := out.Truncate(st.Size()); err != nil {
		return err
	}
	buf := make([]byte, 1<<20)
	for off := int64(0); off < st.Size(); {
		data, err := unix.Seek(int(in.Fd()), off, unix.SEEK_DATA)
		if err != nil {
			break // ENXIO: no data after off
		}
		hole, err := unix.Seek(int(in.Fd()), data, unix.SEEK_HOLE)
		if err != nil {
			return err
		}
		for p := data; p < hole; {
			n, err := in.ReadAt(buf[:min(int64(len(buf)), hole-p)], p)
			if n > 0 {
				if _, werr := out.WriteAt(buf[:n], p); werr != nil {
					return werr
				}
				p += int64(n)
			}
			if err != nil && n == 0 {
				return err
			}
		}
		off = hole
	}
	return out.Sync()
}

// Grow makes the volume sizeBytes long and tells the kernel, as an EBS
// modification does for an attached volume.
func (v *Volume) Grow(t testing.TB, sizeBytes int64) {
	t.Helper()
	if err := os.Truncate(v.File, sizeBytes); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("losetup", "--set-capacity", v.Device).CombinedOutput(); err != nil {
		t.Fatalf("losetup --set-capacity %s: %v: %s", v.Device, err, out)
	}
}

// MountPoints returns where the volume's device is mounted, in mount order.
func (v *Volume) MountPoints(t testing.TB) []string {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat(v.Device, &st); err != nil {
		t.Fatal(err)
	}
	devNum := fmt.Sprintf("%d:%d", unix.Major(st.Rdev), unix.Minor(st.Rdev))
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var paths []string
	s := bufio.NewScanner(f)
	for s.Scan() {
		// Fields: id parent major:minor root mount-point options ...
		fields := strings.Fields(s.Text())
		if len(fields) > 4 && fields[2] == devNum {
			paths = append(paths, unescapeMountPath(fields[4]))
		}
	}
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	return paths
}

// Detach unmounts whatever a failed test left mounted from the device,
// detaches the loop device and removes the link; its file stays. It is
// done when the test ends, and may be done before: a volume detached from
// the node (or the node rebooting) is detached again at once.
func (v *Volume) Detach(t testing.TB) {
	if v.detached {
		return
	}
	v.detached = true
	mounts := v.MountPoints(t)
	slices.Reverse(mounts)
	for _, p := range mounts {
		t.Errorf("volume %s still mounted at %s when it was detached; unmounting", v.ID, p)
		if err := unix.Unmount(p, unix.MNT_DETACH); err != nil {
			t.Errorf("unmount %s: %v", p, err)
		}
	}
	if out, err := exec.Command("losetup", "--detach", v.Device).CombinedOutput(); err != nil {
		t.Errorf("losetup --detach %s: %v: %s", v.Device, err, out)
	}
	if err := os.Remove(v.Link); err != nil && !os.IsNotExist(err) {
		t.Errorf("remove %s: %v", v.Link, err)
	}
}

// unescapeMountPath undoes the octal escapes mountinfo uses for blanks.
func unescapeMountPath(p string) string {
	r := strings.NewReplacer(`\040`, " ", `\011`, "\t", `\012`, "\n", `\134`, `\`)
	return r.Replace(p)
}
