//go:build linux

package node_test

import (
	"errors"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sys/unix"

	"github.com/diskplane/diskplane/pkg/driver/volumehealth"
	"github.com/diskplane/diskplane/pkg/testutil"
)

// failIO asks the emulator's admin API to make the volume's device fail its
// I/O (or serve it again), as a disk whose storage went bad.
func (n *cloudNode) failIO(v volume, fail bool) {
	n.t.Helper()
	body := `{"failIO":false}`
	if fail {
		body = `{"failIO":true}`
	}
	req, err := http.NewRequest(http.MethodPut, n.env.AdminURL+"/volumes/"+v.ID+"/device", strings.NewReader(body))
	if err != nil {
		n.t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		n.t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		n.t.Fatalf("PUT device fault of %s: %s", v.ID, resp.Status)
	}
}

// ext4Dir mounts a fresh ext4 filesystem (on a loop device over a sparse
// file) for the test, unmounted when it ends: the emulator can fail a
// device's I/O only with its images on ext4 (a node VM's /tmp is tmpfs).
func ext4Dir(t *testing.T) string {
	t.Helper()
	dir, img := t.TempDir(), filepath.Join(t.TempDir(), "ext4.img")
	if err := os.WriteFile(img, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(img, 3<<30); err != nil {
		t.Fatal(err)
	}
	for _, cmd := range [][]string{{"mkfs.ext4", "-q", img}, {"mount", "-o", "loop", img, dir}} {
		if out, err := exec.Command(cmd[0], cmd[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%v: %v: %s", cmd, err, out)
		}
	}
	t.Cleanup(func() { unmountWhenFree(t, dir) })
	return dir
}

// unmountWhenFree unmounts dir, waiting a little while it is busy: the
// kernel lets go of a detached loop device's backing file asynchronously.
func unmountWhenFree(t *testing.T, dir string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := unix.Unmount(dir, 0)
		if err == nil {
			return
		}
		if !errors.Is(err, unix.EBUSY) || time.Now().After(deadline) {
			t.Errorf("unmount %s: %v", dir, err)
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// condition is NodeGetVolumeStats' volume condition at path.
func (n *cloudNode) condition(v volume, path string) (abnormal bool, message string) {
	n.t.Helper()
	resp, err := n.svc.NodeGetVolumeStats(n.t.Context(), &csi.NodeGetVolumeStatsRequest{VolumeId: v.ID, VolumePath: path})
	if err != nil {
		n.t.Fatalf("NodeGetVolumeStats: %v", err)
	}
	abnormal, message, ok := volumehealth.Condition(resp)
	if !ok {
		n.t.Fatal("NodeGetVolumeStats carries no volume condition")
	}
	return abnormal, message
}

// TestVolumeConditionOfAFailingDevice runs the node service on a volume the
// emulator attached, stages and publishes it, then has the emulator make
// its device fail every write: once the pod's writes hit the errors, ext4
// records them (and turns read-only, which a kernel may or may not show),
// and the volume's condition and NodeGetVolumeHealth say so. The recorded
// errors stay reported after the device heals, until the filesystem is
// checked.
func TestVolumeConditionOfAFailingDevice(t *testing.T) {
	testutil.RequireRoot(t, "mkfs.ext4", "mount")
	n := newCloudNodeIn(t, ext4Dir(t))
	v := n.attachNew(1)
	staging, target := n.kubeletPaths(v)
	if err := n.stage(v, staging, mountCapability("ext4")); err != nil {
		t.Fatal(err)
	}
	n.publish(v, staging, target, mountCapability("ext4"))
	if abnormal, msg := n.condition(v, target); abnormal || msg != "healthy" {
		t.Fatalf("before the fault: abnormal %v, %q", abnormal, msg)
	}

	n.failIO(v, true)
	// The pod writes; ext4 records the error once its journal could not be
	// written.
	deadline := time.Now().Add(30 * time.Second)
	for {
		f, err := os.Create(filepath.Join(target, "data"))
		if err == nil {
			_, _ = f.Write(make([]byte, 64<<10))
			_ = f.Sync()
			_ = f.Close()
		}
		if _, msg := n.condition(v, target); strings.Contains(msg, "recorded") {
			t.Logf("condition after the pod's writes failed: %s", msg)
			break
		}
		if time.Now().After(deadline) {
			_, msg := n.condition(v, target)
			t.Fatalf("30 s after the device failed, the condition is %q", msg)
		}
		time.Sleep(200 * time.Millisecond)
	}
	resp, err := n.svc.NodeGetVolumeHealth(t.Context(), &csi.NodeGetVolumeHealthRequest{VolumeId: v.ID})
	if err != nil {
		t.Fatal(err)
	}
	reasons := map[string]csi.VolumeHealthErrorType{}
	for _, e := range resp.GetVolumeHealth().GetHealthStatuses() {
		reasons[e.GetReason()] = e.GetStatus()
	}
	if reasons["FilesystemErrors"] != csi.VolumeHealthErrorType_DEGRADED {
		t.Errorf("NodeGetVolumeHealth by volume ID: %v", reasons)
	}

	n.failIO(v, false)
	if abnormal, msg := n.condition(v, target); !abnormal || !strings.Contains(msg, "e2fsck") {
		t.Errorf("after the device healed: abnormal %v, %q; want the recorded errors until the filesystem is checked", abnormal, msg)
	}
	n.unpublish(v, target)
	n.unstage(v, staging)
	n.detachAndDelete(v)
}
