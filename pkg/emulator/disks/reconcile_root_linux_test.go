package disks

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// bindManually binds a loop device to a file with losetup, as another tool
// on the machine would, and unbinds it when the test ends if it still is.
func bindManually(t *testing.T, file string) string {
	t.Helper()
	out, err := exec.Command("losetup", "--find", "--show", file).CombinedOutput()
	if err != nil {
		t.Fatalf("losetup %s: %v\n%s", file, err, out)
	}
	dev := strings.TrimSpace(string(out))
	t.Cleanup(func() {
		if d, bound, _ := readLoopDevice(filepath.Base(dev)); bound && d.backingFile == file {
			_ = exec.Command("losetup", "--detach", dev).Run()
		}
	})
	return dev
}

// activeDevice returns the one device bound to a volume, failing otherwise.
func activeDevice(t *testing.T, s *loopStore, volumeID string) string {
	t.Helper()
	devs, err := s.activeDevices(s.volumePath(volumeID))
	if err != nil || len(devs) != 1 {
		t.Fatalf("devices bound to %s = %v, %v; want exactly one", volumeID, devs, err)
	}
	return devs[0].path()
}

func TestReconcileAfterRestart(t *testing.T) {
	s, linkDir := newRootStore(t)
	for _, id := range []string{volA, volB, volC, volD} {
		if err := s.CreateVolume(id, 8*mib); err != nil {
			t.Fatal(err)
		}
	}
	// A stays attached, but the machine loses its loop device.
	devA := mustAttach(t, s, linkDir, volA)
	run(t, "losetup", "--detach", devA)
	// B stays attached and gets a second device from someone else.
	devB := mustAttach(t, s, linkDir, volB)
	bindManually(t, s.volumePath(volB))
	// C was detached in the model while the emulator was down.
	mustAttach(t, s, linkDir, volC)
	// D is not attached but left a link to a device that is gone.
	if err := os.Symlink("/dev/loop987654", filepath.Join(linkDir, LinkName(volD))); err != nil {
		t.Fatal(err)
	}
	// A link and a loop device that are not the store's.
	foreignLink := filepath.Join(linkDir, LinkName("vol-0ff"))
	if err := os.Symlink("../../nvme1n1", foreignLink); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.Remove(foreignLink) })
	foreignFile := filepath.Join(t.TempDir(), "vol-0000000000000000a.img")
	if err := os.WriteFile(foreignFile, make([]byte, mib), 0o600); err != nil {
		t.Fatal(err)
	}
	foreignDev := bindManually(t, foreignFile)
	// And a half-written image and a half-made link a crash left.
	tmpLink := filepath.Join(linkDir, tempPrefix+LinkName(volA)+"-99999")
	if err := os.Symlink("/dev/loop987653", tmpLink); err != nil {
		t.Fatal(err)
	}
	leftover := filepath.Join(s.volumesDir, tempPrefix+"vol-0000000000000000e.img-1")
	if err := os.WriteFile(leftover, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}

	// Restart: a new store over the same directories.
	restarted, err := NewLoopStore(filepath.Dir(s.volumesDir), linkDir)
	if err != nil {
		t.Fatal(err)
	}
	s = restarted.(*loopStore)
	if _, err := os.Stat(leftover); !os.IsNotExist(err) {
		t.Fatalf("half-written image survived the restart: %v", err)
	}
	for range 2 { // reconciling a reconciled machine changes nothing
		if err := s.Reconcile([]string{volA, volB}); err != nil {
			t.Fatalf("Reconcile: %v", err)
		}
		if dev := activeDevice(t, s, volA); mustAttach(t, s, linkDir, volA) != dev {
			t.Fatalf("A's link does not name its device %s", dev)
		}
		if dev := activeDevice(t, s, volB); dev != devB || mustAttach(t, s, linkDir, volB) != devB {
			t.Fatalf("B is on %s, want its linked device %s kept", dev, devB)
		}
		if _, err := os.Lstat(tmpLink); !os.IsNotExist(err) {
			t.Fatalf("the half-made link survived: %v", err)
		}
		assertDetached(t, s, linkDir, volC)
		assertDetached(t, s, linkDir, volD)
		if target, err := os.Readlink(foreignLink); err != nil || target != "../../nvme1n1" {
			t.Fatalf("the foreign link was touched: %q, %v", target, err)
		}
		if d, bound, err := readLoopDevice(filepath.Base(foreignDev)); err != nil || !bound || d.backingFile != foreignFile {
			t.Fatalf("the foreign loop device was touched: %+v, bound %v, %v", d, bound, err)
		}
	}
	mustDetach(t, s, linkDir, volA)
	mustDetach(t, s, linkDir, volB)
}
