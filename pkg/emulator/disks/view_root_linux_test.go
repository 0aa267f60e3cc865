package disks

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/diskplane/diskplane/pkg/testutil"
)

// requireDevicesCgroupEnv names the environment variable that turns a
// skipped devices-cgroup test into a failure: CI's host mounts the cgroup v1
// devices controller (the node VM does not).
const requireDevicesCgroupEnv = "DISKPLANE_REQUIRE_DEVICES_CGROUP"

// devicesCgroupRoot is where the cgroup v1 devices controller is mounted.
const devicesCgroupRoot = "/sys/fs/cgroup/devices"

// newInstanceCgroup makes a devices cgroup that denies reading and writing
// every loop device, as a node of the multi-node local cluster gets
// (hack/local-cluster), with two cgroups below it made afterwards:
// "privileged" allows by default (its parent's denials copied) and "plain"
// denies by default, as runc makes them. They are removed when the test
// ends.
func newInstanceCgroup(t *testing.T, name string) string {
	t.Helper()
	if _, err := os.Stat(filepath.Join(devicesCgroupRoot, "devices.allow")); err != nil {
		testutil.SkipLoudly(t, requireDevicesCgroupEnv, "needs the cgroup v1 devices controller at "+devicesCgroupRoot,
			"run it on a host with cgroup v1 (CI's)")
	}
	root := filepath.Join(devicesCgroupRoot, fmt.Sprintf("diskplane-test-%d-%s", os.Getpid(), name))
	if err := os.Mkdir(root, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, d := range []string{"privileged", "plain", ""} {
			if err := os.Remove(filepath.Join(root, d)); err != nil && !os.IsNotExist(err) {
				t.Errorf("remove cgroup: %v", err)
			}
		}
	})
	for n := range 1024 {
		if err := writeDeviceRule(filepath.Join(root, "devices.deny"), fmt.Sprintf("b 7:%d rw", n), false); err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range []string{"privileged", "plain"} {
		if err := os.Mkdir(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := writeDeviceRule(filepath.Join(root, "plain", "devices.deny"), "a", false); err != nil {
		t.Fatal(err)
	}
	return root
}

// canRead reports whether a process in the cgroup can open and read the
// device: a shell moves itself into the cgroup, then dd opens the device.
func canRead(t *testing.T, cgroup, dev string) bool {
	t.Helper()
	script := fmt.Sprintf("echo $$ > %s/cgroup.procs && exec dd if=%s of=/dev/null bs=4096 count=1 status=none", cgroup, dev)
	return exec.Command("sh", "-c", script).Run() == nil
}

// TestViewExposesOnlyToItsInstance attaches a volume and exposes it to one
// of two instances: only that instance's link directory names it and only
// its default-allow cgroups can open it; the other instance cannot, even
// with the device node in hand. Withdraw and Reconcile take it back.
func TestViewExposesOnlyToItsInstance(t *testing.T) {
	s, _ := newRootStore(t, "dd")
	a := View{LinkDir: filepath.Join(t.TempDir(), "by-id"), DevicesCgroup: newInstanceCgroup(t, "a")}
	b := View{LinkDir: filepath.Join(t.TempDir(), "by-id"), DevicesCgroup: newInstanceCgroup(t, "b")}
	if err := s.CreateVolume(volA, 16*mib); err != nil {
		t.Fatal(err)
	}
	dev, err := s.Attach(volA)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Detach(volA, true) })
	for _, cg := range []string{a.DevicesCgroup, b.DevicesCgroup + "/privileged"} {
		if canRead(t, cg, dev) {
			t.Fatalf("%s opens %s before any Expose: the cgroup does not deny loop devices", cg, dev)
		}
	}

	if err := a.Expose(volA, dev); err != nil {
		t.Fatal(err)
	}
	if err := a.Expose(volA, dev); err != nil {
		t.Fatalf("Expose again: %v", err)
	}
	if target, err := os.Readlink(filepath.Join(a.LinkDir, LinkName(volA))); err != nil || target != dev {
		t.Fatalf("link in a's directory = %q, %v; want %q", target, err, dev)
	}
	if _, err := os.Lstat(filepath.Join(b.LinkDir, LinkName(volA))); !os.IsNotExist(err) {
		t.Fatalf("b's directory has a link to a's volume (err %v)", err)
	}
	readable := map[string]bool{
		a.DevicesCgroup:                 true,
		a.DevicesCgroup + "/privileged": true,  // made before the attach: the grant reached it
		a.DevicesCgroup + "/plain":      false, // an ordinary container gets only its listed devices
		b.DevicesCgroup:                 false,
		b.DevicesCgroup + "/privileged": false,
	}
	for cg, want := range readable {
		if got := canRead(t, cg, dev); got != want {
			t.Errorf("after Expose to a: %s can read %s = %v, want %v", cg, dev, got, want)
		}
	}

	if err := a.Withdraw(volA, dev); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(filepath.Join(a.LinkDir, LinkName(volA))); !os.IsNotExist(err) {
		t.Fatalf("link still in a's directory after Withdraw (err %v)", err)
	}
	if canRead(t, a.DevicesCgroup+"/privileged", dev) {
		t.Errorf("a's privileged cgroup still opens %s after Withdraw", dev)
	}
	if err := a.Withdraw(volA, dev); err != nil {
		t.Fatalf("Withdraw again: %v", err)
	}

	// After a restart: b's view still holds the link (a crash before its
	// Withdraw), a's must get the volume again.
	if err := b.Expose(volA, dev); err != nil {
		t.Fatal(err)
	}
	if err := b.Reconcile(map[string]string{}); err != nil {
		t.Fatalf("Reconcile b: %v", err)
	}
	if err := a.Reconcile(map[string]string{volA: dev}); err != nil {
		t.Fatalf("Reconcile a: %v", err)
	}
	if _, err := os.Lstat(filepath.Join(b.LinkDir, LinkName(volA))); !os.IsNotExist(err) {
		t.Errorf("Reconcile left b's stale link (err %v)", err)
	}
	if canRead(t, b.DevicesCgroup+"/privileged", dev) {
		t.Errorf("Reconcile left b able to open %s", dev)
	}
	if !canRead(t, a.DevicesCgroup+"/privileged", dev) {
		t.Errorf("Reconcile did not give a its device %s back", dev)
	}
	if err := a.Withdraw(volA, dev); err != nil {
		t.Fatal(err)
	}
}
