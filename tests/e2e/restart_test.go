//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/diskplane/diskplane/pkg/emulator/model"
)

// TestDriverKilledDuringProvisioning kills the Diskplane plugin with SIGKILL
// after EC2 accepted its CreateVolume but before the plugin could see the
// volume (the emulator hides new volumes from Describe* while its eventual
// consistency fault is set, so the plugin is still waiting for it), then
// starts the driver again, as Kubernetes restarts a crashed controller pod.
// The claim still binds, to the volume created before the kill: exactly one
// EC2 volume exists for it, and the pod runs with it.
//
// It is not parallel: it stops the driver every other test uses (Go runs all
// sequential tests before the parallel ones).
func TestDriverKilledDuringProvisioning(t *testing.T) {
	sc := newScenario(t)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := env.emulator.patchFaults(ctx, `{"eventualConsistency": "0s"}`); err != nil {
			t.Errorf("reset the emulator's faults: %v", err)
		}
		// Whatever happened, leave the driver running for the other tests.
		if out, err := driverScript(ctx, "up"); err != nil {
			t.Errorf("hack/e2e/driver.sh up: %v\n%s", err, out)
		}
	})
	if err := env.emulator.patchFaults(t.Context(), `{"eventualConsistency": "10m"}`); err != nil {
		t.Fatal(err)
	}

	m := sc.example("dynamic-provisioning")
	sc.create(m...)
	claim := sc.claim("diskplane-claim")
	volumeName := "pvc-" + string(claim.UID)
	var created model.Volume
	sc.waitFor("EC2 to create the volume "+volumeName, bindTimeout, func(ctx context.Context) (bool, string, error) {
		vols, err := env.emulator.volumesTagged(ctx, "CSIVolumeName", volumeName)
		if err != nil || len(vols) == 0 {
			return false, "no volume yet", err
		}
		created = vols[0]
		return true, "", nil
	})
	// The plugin cannot see the volume, so it cannot have answered yet.
	if c := sc.claim("diskplane-claim"); c.Spec.VolumeName != "" {
		t.Fatalf("claim bound to %s while its EC2 volume was still hidden from the plugin", c.Spec.VolumeName)
	}
	killPlugin(t)

	if err := env.emulator.patchFaults(t.Context(), `{"eventualConsistency": "0s"}`); err != nil {
		t.Fatal(err)
	}
	if out, err := driverScript(t.Context(), "restart"); err != nil {
		t.Fatalf("hack/e2e/driver.sh restart: %v\n%s", err, out)
	}
	sc.podReady("app")
	_, pv := sc.claimBound("diskplane-claim")
	if pv.Spec.CSI.VolumeHandle != created.ID {
		t.Errorf("claim bound to EC2 volume %s, want %s, the one created before the kill", pv.Spec.CSI.VolumeHandle, created.ID)
	}
	vols, err := env.emulator.volumesTagged(t.Context(), "CSIVolumeName", volumeName)
	if err != nil {
		t.Fatal(err)
	}
	if len(vols) != 1 {
		var ids []string
		for _, v := range vols {
			ids = append(ids, v.ID)
		}
		t.Fatalf("EC2 volumes named %s: %v, want exactly one", volumeName, ids)
	}
	checkAttachedVolume(t, pv, 4)
}

// killPlugin sends SIGKILL to the plugin that hack/local-cluster/driver.sh
// recorded, after checking that the PID still runs that binary, and waits
// until it is gone.
func killPlugin(t *testing.T) {
	t.Helper()
	file := filepath.Join(env.clusterDir, "run", "pids", "driver-plugin.pid")
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatalf("the plugin's PID: %v", err)
	}
	fields := strings.Fields(string(b))
	if len(fields) != 2 {
		t.Fatalf("%s: %q, want \"PID EXE\"", file, b)
	}
	pid, err := strconv.Atoi(fields[0])
	if err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	runs := func() bool {
		exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
		return err == nil && strings.TrimSuffix(exe, " (deleted)") == fields[1]
	}
	if !runs() {
		t.Fatalf("PID %d of %s is not running %s", pid, file, fields[1])
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatalf("kill the plugin (PID %d): %v", pid, err)
	}
	if err := poll(t.Context(), time.Minute, func(context.Context) (bool, string, error) {
		return !runs(), "still running", nil
	}); err != nil {
		t.Fatalf("the plugin (PID %d) did not die: %v", pid, err)
	}
	t.Logf("killed the plugin (PID %d) during provisioning", pid)
}

// driverScript runs hack/e2e/driver.sh with the environment of the test
// run (the same settings make e2e gave hack/e2e/up.sh).
func driverScript(ctx context.Context, action string) (string, error) {
	cmd := exec.CommandContext(ctx, filepath.Join(env.repo, "hack", "e2e", "driver.sh"), action)
	out, err := cmd.CombinedOutput()
	return string(out), err
}
