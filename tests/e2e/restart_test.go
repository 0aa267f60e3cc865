//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/diskplane/diskplane/pkg/emulator/model"
	"github.com/diskplane/diskplane/tests/bench"
)

// TestDriverKilledDuringProvisioning kills the Diskplane plugin with SIGKILL
// after EC2 accepted its CreateVolume but before the plugin could see the
// volume (the emulator hides new volumes from Describe* while its eventual
// consistency fault is set, so the plugin is still waiting for it), then
// lets the driver come back: the kubelet restarts the controller pod's
// plugin container when Diskplane runs in the cluster; hack/e2e/driver.sh
// starts the host processes again otherwise. The claim still binds, to the
// volume created before the kill: exactly one EC2 volume exists for it, and
// the pod runs with it.
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
		if err := env.driver.ensureRunning(ctx); err != nil {
			t.Errorf("the driver (%s) is not running again: %v", env.driver, err)
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
	env.driver.crashController(t)

	if err := env.emulator.patchFaults(t.Context(), `{"eventualConsistency": "0s"}`); err != nil {
		t.Fatal(err)
	}
	if err := env.driver.recoverController(t.Context()); err != nil {
		t.Fatalf("the driver (%s) did not come back: %v", env.driver, err)
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

// TestSnapshotAfterControllerRestart takes a snapshot right after the
// controller restarted. Its VolumeSnapshotContent names no earlier process
// (design.md, "Snapshot intents"), so the new controller asks EC2 at once
// instead of waiting out its visibility window after the start; the figure
// says how long the snapshot took, against that window and the snapshot's
// own latency (make bench reports it: DISKPLANE_BENCH_DIR). Not parallel: it
// stops the driver every other test uses.
func TestSnapshotAfterControllerRestart(t *testing.T) {
	sc := newScenario(t)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := env.driver.ensureRunning(ctx); err != nil {
			t.Errorf("the driver (%s) is not running again: %v", env.driver, err)
		}
	})
	sc.create(sc.example("dynamic-provisioning")...)
	sc.podReady("app")

	env.driver.crashController(t)
	if err := env.driver.recoverController(t.Context()); err != nil {
		t.Fatalf("the driver (%s) did not come back: %v", env.driver, err)
	}
	m := sc.example("snapshot")
	created := time.Now()
	sc.create(m.get(t, "VolumeSnapshotClass"), m.get(t, "VolumeSnapshot"))
	snapshotID := sc.snapshotReady("diskplane-claim-snapshot")
	res := bench.SnapshotAfterStart{ToReady: time.Since(created)}

	// When EC2 got the request, and how long the snapshot itself took, as
	// the emulator drew it.
	draws, err := env.emulator.client.Transitions(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(draws, func(d model.Draw) bool { return d.Resource == snapshotID && d.Change == "snapshot" })
	if i < 0 {
		t.Fatalf("the emulator reports no transition of snapshot %s", snapshotID)
	}
	res.ToAsked, res.Floor = draws[i].Began.Sub(created), draws[i].Takes
	t.Logf("figure: snapshot %s ready %.1fs after its VolumeSnapshot, made as the controller came back: EC2 asked after %.1fs, "+
		"the snapshot's own latency %.1fs (a wait for a predecessor would have held the request until the controller's "+
		"--visibility-timeout, 20s in the local cluster's setups, after its start)",
		snapshotID, res.ToReady.Seconds(), res.ToAsked.Seconds(), res.Floor.Seconds())
	if out := os.Getenv(benchDirEnv); out != "" {
		data, err := json.Marshal(res)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(out, "p3-snapshot.json"), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
