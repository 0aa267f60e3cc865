//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/diskplane/diskplane/pkg/snapshotintent"
)

// TestSnapshotRestore takes a snapshot (examples/snapshot) of the claim of
// examples/dynamic-provisioning while its pod writes, and restores it into a
// new claim: the EC2 snapshot carries the class's tag template, the new
// volume is made from it, and a pod reading it finds the data written
// before the snapshot.
func TestSnapshotRestore(t *testing.T) {
	t.Parallel()
	sc := newScenario(t)
	source := sc.example("dynamic-provisioning")
	sc.create(source...)
	sc.podReady("app")
	_, sourcePV := sc.claimBound("diskplane-claim")
	marker := "diskplane-e2e-" + sc.suffix
	sc.exec("app", "echo "+marker+" > /data/marker && sync")

	m := sc.example("snapshot")
	sc.create(m.get(t, "VolumeSnapshotClass"), m.get(t, "VolumeSnapshot"))
	snapshotID := sc.snapshotReady("diskplane-claim-snapshot")
	snaps, err := env.emulator.snapshots(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, s := range snaps {
		if s.ID != snapshotID {
			continue
		}
		found = true
		if s.VolumeID != sourcePV.Spec.CSI.VolumeHandle {
			t.Errorf("EC2 snapshot %s is of volume %s, want %s", s.ID, s.VolumeID, sourcePV.Spec.CSI.VolumeHandle)
		}
		if want := sc.ns + "/diskplane-claim-snapshot"; s.Tags["snapshot-of"] != want {
			t.Errorf("EC2 snapshot %s has the tag snapshot-of=%q, want %q (the class's template)", s.ID, s.Tags["snapshot-of"], want)
		}
	}
	if !found {
		t.Fatalf("the emulator has no snapshot %s", snapshotID)
	}

	sc.create(m.get(t, "PersistentVolumeClaim"), m.get(t, "Pod"))
	sc.podReady("restored-app")
	_, pv := sc.claimBound("diskplane-restored-claim")
	if vol := checkAttachedVolume(t, pv, 4); vol.SnapshotID != snapshotID {
		t.Errorf("EC2 volume %s was made from snapshot %q, want %s", vol.ID, vol.SnapshotID, snapshotID)
	}
	if got := strings.TrimSpace(sc.exec("restored-app", "cat /data/marker")); got != marker {
		t.Fatalf("the restored volume's /data/marker holds %q, want %q", got, marker)
	}
}

// TestClone clones the claim of examples/dynamic-provisioning
// (examples/volume-cloning): the new EC2 volume is a copy of the source
// volume, in its zone, and holds its data.
func TestClone(t *testing.T) {
	t.Parallel()
	sc := newScenario(t)
	sc.create(sc.example("dynamic-provisioning")...)
	sc.podReady("app")
	_, sourcePV := sc.claimBound("diskplane-claim")
	marker := "diskplane-e2e-" + sc.suffix
	sc.exec("app", "echo "+marker+" > /data/marker && sync")

	sc.create(sc.example("volume-cloning")...)
	sc.podReady("clone-app")
	_, pv := sc.claimBound("diskplane-clone-claim")
	vol := checkAttachedVolume(t, pv, 4)
	if vol.SourceVolumeID != sourcePV.Spec.CSI.VolumeHandle {
		t.Errorf("EC2 volume %s is a copy of %q, want %s", vol.ID, vol.SourceVolumeID, sourcePV.Spec.CSI.VolumeHandle)
	}
	if got := strings.TrimSpace(sc.exec("clone-app", "cat /data/marker")); got != marker {
		t.Fatalf("the clone's /data/marker holds %q, want %q", got, marker)
	}
	// The clone is a volume of its own: writing to it leaves the source as it was.
	sc.exec("clone-app", "echo changed-in-clone > /data/marker && sync")
	if got := strings.TrimSpace(sc.exec("app", "cat /data/marker")); got != marker {
		t.Fatalf("after writing to the clone, the source's /data/marker holds %q, want %q", got, marker)
	}
}

// snapshotReady waits until the VolumeSnapshot is ready to use and returns
// the EC2 snapshot ID behind it.
func (sc *scenario) snapshotReady(name string) string {
	sc.t.Helper()
	var content string
	sc.waitFor("snapshot "+name+" ready", snapshotTimeout, func(ctx context.Context) (bool, string, error) {
		s, err := env.dynamic.Resource(snapshotsResource).Namespace(sc.ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		ready, _, _ := unstructured.NestedBool(s.Object, "status", "readyToUse")
		content, _, _ = unstructured.NestedString(s.Object, "status", "boundVolumeSnapshotContentName")
		errMsg, _, _ := unstructured.NestedString(s.Object, "status", "error", "message")
		return ready, fmt.Sprintf("readyToUse=%v content=%q error=%q", ready, content, errMsg), nil
	})
	c, err := env.dynamic.Resource(contentsResource).Get(sc.t.Context(), content, metav1.GetOptions{})
	if err != nil {
		sc.t.Fatalf("get VolumeSnapshotContent %s: %v", content, err)
	}
	id, _, _ := unstructured.NestedString(c.Object, "status", "snapshotHandle")
	if !strings.HasPrefix(id, "snap-") {
		sc.t.Fatalf("VolumeSnapshotContent %s has the handle %q, not an EC2 snapshot ID", content, id)
	}
	// The controller recorded itself on the content before it asked EC2
	// (design.md, "Snapshot intents").
	key := env.driverName + "/" + snapshotintent.AnnotationName
	if c.GetAnnotations()[key] == "" {
		sc.t.Fatalf("VolumeSnapshotContent %s has no annotation %s: the controller did not record itself before asking EC2 for the snapshot",
			content, key)
	}
	return id
}
