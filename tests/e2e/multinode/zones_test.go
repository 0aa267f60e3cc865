//go:build e2e_multinode

package multinode

import (
	"context"
	"fmt"
	"maps"
	"os/exec"
	"slices"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/diskplane/diskplane/tests/e2e/poll"
)

// TestZones runs a data workload in each zone: WaitForFirstConsumer puts
// each volume in the zone of the node its pod was scheduled to. A snapshot
// of the first zone's volume restores into the other zone with its data
// (EBS snapshots are regional). With every worker of a volume's zone
// cordoned, a new pod of that volume, free to go to any zone, stays Pending
// and the scheduler names the volume's zone as the reason; it runs once a
// node of the zone is back.
func TestZones(t *testing.T) {
	zones := workerZones()
	if len(zones) < 2 {
		t.Fatalf("the workers are in %d zone(s), the test needs two", len(zones))
	}
	ns := newNamespace(t, "zones")
	for i, zone := range zones[:2] {
		name := fmt.Sprintf("db%d", i)
		pod := createDataStatefulSet(t, ns, name, zone, "")
		volumeID := claimVolume(t, ns, "data-"+name+"-0")
		if got := volumeZone(t, volumeID); got != zone || workerNamed(t, pod.Spec.NodeName).zone != zone {
			t.Errorf("%s: pod on %s, volume %s in %s; want both in %s", name, pod.Spec.NodeName, volumeID, got, zone)
		}
	}

	snapshot := "snap"
	if err := kubectlApply(t, fmt.Sprintf(`apiVersion: snapshot.storage.k8s.io/v1
kind: VolumeSnapshot
metadata: {name: %s, namespace: %s}
spec: {volumeSnapshotClassName: diskplane, source: {persistentVolumeClaimName: data-db0-0}}
`, snapshot, ns)); err != nil {
		t.Fatal(err)
	}
	err := poll.Until(t.Context(), podTimeout, func(ctx context.Context) (bool, string, error) {
		out, err := kubectl(ctx, "get", "volumesnapshot", "-n", ns, snapshot, "-o", "jsonpath={.status.readyToUse}")
		return out == "true", "readyToUse=" + out, err
	})
	if err != nil {
		t.Fatalf("snapshot: %v", err)
	}
	restored := createStatefulSet(t, ns, restoredStatefulSet("restored", zones[1], "", snapshot))
	if got := volumeZone(t, claimVolume(t, ns, "data-restored-0")); got != zones[1] {
		t.Errorf("the snapshot of a volume in %s was restored in %s, want %s", zones[0], got, zones[1])
	}
	t.Logf("the snapshot of %s's volume restored in %s on %s, its data intact", zones[0], zones[1], restored.Spec.NodeName)

	// No schedulable node in the volume's zone.
	var cordoned []string
	for _, w := range env.workers {
		if w.zone == zones[1] {
			cordon(t, w.name, true)
			cordoned = append(cordoned, w.name)
		}
	}
	uncordon := func() {
		for _, n := range cordoned {
			cordon(t, n, false)
		}
	}
	defer uncordon()
	old, err := env.client.CoreV1().Pods(ns).Get(t.Context(), "db1-0", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// The workload's own zone rule goes (the StatefulSet replaces its pod):
	// what keeps the new pod out of the other zone is the volume's.
	if out, err := kubectl(t.Context(), "patch", "statefulset", "db1", "-n", ns, "--type=json",
		"-p", `[{"op":"remove","path":"/spec/template/spec/affinity"}]`); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	err = poll.Until(t.Context(), podTimeout, func(ctx context.Context) (bool, string, error) {
		events, err := env.client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=db1-0,reason=FailedScheduling"})
		if err != nil {
			return false, "", err
		}
		for _, e := range events.Items {
			// Kubernetes 1.35 says "didn't match PersistentVolume's node
			// affinity"; earlier releases "volume node affinity conflict".
			if e.InvolvedObject.UID != old.UID && (strings.Contains(e.Message, "PersistentVolume's node affinity") ||
				strings.Contains(e.Message, "volume node affinity conflict")) {
				t.Logf("the pod whose volume is in %s, with no schedulable node there: %s", zones[1], e.Message)
				return true, "", nil
			}
		}
		return false, podEvents(ctx, ns, "db1-0"), nil
	})
	if err != nil {
		t.Fatalf("no FailedScheduling event naming the volume's zone: %v", err)
	}
	uncordon()
	waitPodReady(t, ns, "db1-0", old.UID, "")
}

// workerZones are the zones of the workers, sorted.
func workerZones() []string {
	set := map[string]bool{}
	for _, w := range env.workers {
		set[w.zone] = true
	}
	return slices.Sorted(maps.Keys(set))
}

// volumeZone is the zone the emulator says a volume is in.
func volumeZone(t *testing.T, volumeID string) string {
	t.Helper()
	volumes, err := env.emulator.Volumes(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range volumes {
		if v.ID == volumeID {
			return v.Zone
		}
	}
	t.Fatalf("the emulator has no volume %s", volumeID)
	return ""
}

// kubectlApply applies a manifest given as text.
func kubectlApply(t *testing.T, manifest string) error {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), env.kubectl, "--kubeconfig", env.kubeconfig, "apply", "-f", "-")
	cmd.Stdin = strings.NewReader(manifest)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("kubectl apply: %w: %s", err, out)
	}
	return nil
}
