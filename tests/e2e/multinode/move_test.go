//go:build e2e_multinode

package multinode

import (
	"context"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestPodMovesToAnotherNode moves a StatefulSet's pod between the two
// workers of one zone, first by cordoning its node and deleting the pod, then
// by draining the node it moved to: each time the volume leaves the old
// instance and reaches the new one (and only that node's /dev shows it), and
// the data written on the first node is intact (the pod's readiness probe
// checks it). It prints how long each move took from the pod's deletion to
// the new pod Ready, against the floor of a detach and an attach.
func TestPodMovesToAnotherNode(t *testing.T) {
	zone, _ := zoneWithTwoWorkers(t)
	ns := newNamespace(t, "move")
	pod := createDataStatefulSet(t, ns, "db", zone, "")
	volumeID := claimVolume(t, ns, "data-db-0")
	checkOnlyOn(t, volumeID, pod.Spec.NodeName)
	visited := []string{pod.Spec.NodeName}

	for _, how := range []string{"cordon and delete", "drain"} {
		from := pod.Spec.NodeName
		start := time.Now()
		switch how {
		case "cordon and delete":
			cordon(t, from, true)
			grace := int64(1)
			if err := env.client.CoreV1().Pods(ns).Delete(t.Context(), pod.Name, metav1.DeleteOptions{GracePeriodSeconds: &grace}); err != nil {
				t.Fatal(err)
			}
		case "drain":
			// Only this workload: the controller may run on the node, and
			// moving it is TestLeaderFailover's (tests/e2e/install).
			if out, err := kubectl(t.Context(), "drain", from, "--ignore-daemonsets", "--pod-selector=app=db",
				"--grace-period=1", "--timeout=5m"); err != nil {
				t.Fatalf("drain: %v\n%s", err, out)
			}
		}
		pod, _ = waitPodReady(t, ns, pod.Name, pod.UID, from)
		took := time.Since(start)
		cordon(t, from, false)
		checkOnlyOn(t, volumeID, pod.Spec.NodeName)
		neverShared(t, volumeID)
		visited = append(visited, pod.Spec.NodeName)
		t.Logf("figure: %s: the pod moved %s -> %s in %s, from its deletion to Ready (floor: detach + attach = %s, then mount and start)",
			how, from, pod.Spec.NodeName, took.Round(100*time.Millisecond), moveFloor())
	}

	out, err := kubectl(t.Context(), "exec", "-n", ns, pod.Name, "--", "cat", "/data/nodes")
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Fields(out); strings.Join(got, " ") != strings.Join(visited, " ") {
		t.Errorf("the volume's record of nodes is %v, want %v: a start did not find the data of the one before", got, visited)
	}
}

// TestOtherNodesCannotOpenTheDevice checks the cluster's isolation from a
// node plugin's view: a plugin on another worker cannot open the loop device
// of a volume attached to one worker, not even through a device node it
// makes itself (the devices cgroup refuses), while the plugin on the
// volume's own worker can.
func TestOtherNodesCannotOpenTheDevice(t *testing.T) {
	zone, _ := zoneWithTwoWorkers(t)
	ns := newNamespace(t, "isolation")
	pod := createDataStatefulSet(t, ns, "db", zone, "")
	volumeID := claimVolume(t, ns, "data-db-0")
	major, minor := hostDevice(t, volumeID)
	for _, w := range env.workers {
		plugin := nodePluginPod(t, w.name)
		// A device node of the plugin's own, so that the check does not
		// depend on which loop nodes the worker's /dev has.
		script := "rm -f /tmp/probe && mknod /tmp/probe b " + major + " " + minor +
			" && dd if=/tmp/probe of=/dev/null bs=4096 count=1 2>&1; rc=$?; rm -f /tmp/probe; exit $rc"
		out, err := kubectl(context.Background(), "exec", "-n", plugin.Namespace, plugin.Name, "-c", "diskplane", "--", "sh", "-c", script)
		own := w.name == pod.Spec.NodeName
		switch {
		case own && err != nil:
			t.Errorf("the plugin on %s, which has the volume, cannot read it: %v %s", w.name, err, out)
		case !own && err == nil:
			t.Errorf("the plugin on %s read the device of a volume attached to %s", w.name, pod.Spec.NodeName)
		case !own && !strings.Contains(out+err.Error(), "not permitted"):
			t.Errorf("the plugin on %s was refused for another reason than the devices cgroup: %v %s", w.name, err, out)
		}
	}
}
