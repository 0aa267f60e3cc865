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
	v := &Volume{
		ID:   volumeID,
		File: filepath.Join(dir, "volumes", volumeID+".img"),
		Link: filepath.Join(linkDir, "nvme-Amazon_Elastic_Block_Store_"+strings.Replace(volumeID, "-", "", 1)),
	}
	for _, d := range []string{filepath.Dir(v.File), linkDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(v.File, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(v.File, sizeBytes); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("losetup", "--find", "--show", v.File).CombinedOutput()
	if err != nil {
		t.Fatalf("losetup %s: %v: %s", v.File, err, out)
	}
	v.Device = strings.TrimSpace(string(out))
	t.Cleanup(func() { v.release(t) })
	if err := os.Symlink(v.Device, v.Link); err != nil {
		t.Fatal(err)
	}
	return v
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

// release unmounts whatever a failed test left mounted from the device,
// detaches the loop device and removes the link.
func (v *Volume) release(t testing.TB) {
	mounts := v.MountPoints(t)
	slices.Reverse(mounts)
	for _, p := range mounts {
		t.Errorf("volume %s still mounted at %s when the test ended; unmounting", v.ID, p)
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
