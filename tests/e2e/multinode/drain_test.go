//go:build e2e_multinode

package multinode

import (
	"context"
	"fmt"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/diskplane/diskplane/tests/e2e/poll"
)

// drainedVolumes is how many mounted volumes the drained worker holds.
const drainedVolumes = 10

// forceDetachAfter is Kubernetes' bound on a detach the kubelet never
// confirms: six minutes after a node stops answering, the attach/detach
// controller detaches anyway. A drain must never come near it.
const forceDetachAfter = 6 * time.Minute

// TestDrainWithVolumes drains a worker that holds ten pods with a mounted
// volume each while its node plugin is told to stop, as when a node is
// removed: the plugin's preStop hook keeps it serving until the worker's
// volumes are unmounted and detached, every pod runs again on the other
// worker of the zone with its data, and no volume waits for the six-minute
// forced detach. It prints the drain's time.
func TestDrainWithVolumes(t *testing.T) {
	zone, pair := zoneWithTwoWorkers(t)
	drained, other := pair[0], pair[1]
	if controllerOn(t, drained.name) {
		drained, other = other, drained
	}
	ns := newNamespace(t, "drain")
	cordon(t, other.name, true)
	set := manyStatefulSet("many", zone, drained.name, drainedVolumes)
	if _, err := env.client.AppsV1().StatefulSets(ns).Create(t.Context(), set, metav1.CreateOptions{}); err != nil {
		cordon(t, other.name, false)
		t.Fatal(err)
	}
	err := poll.Until(t.Context(), 2*podTimeout, func(ctx context.Context) (bool, string, error) {
		n, err := readyPodsOn(ctx, ns, drained.name)
		return n == drainedVolumes, fmt.Sprintf("%d of %d Ready on %s", n, drainedVolumes, drained.name), err
	})
	cordon(t, other.name, false)
	if err != nil {
		t.Fatal(err)
	}
	plugin := nodePluginPod(t, drained.name)
	t.Cleanup(func() { cordon(t, drained.name, false) })

	// Cordoned first, as kubectl drain does before it evicts anything: the
	// plugin's hook waits only on a node that is going away.
	start := time.Now()
	cordon(t, drained.name, true)
	drainDone := make(chan error, 1)
	go func() {
		_, err := kubectl(context.Background(), "drain", drained.name, "--ignore-daemonsets", "--pod-selector=app=many",
			"--grace-period=1", "--timeout=10m")
		drainDone <- err
	}()
	if err := env.client.CoreV1().Pods(plugin.Namespace).Delete(t.Context(), plugin.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatalf("stop the node plugin: %v", err)
	}
	var detached, pluginGone, moved time.Duration
	deadline := start.Add(forceDetachAfter)
	for detached == 0 || pluginGone == 0 || moved == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%s after the drain started: volumes detached %v, old node plugin gone %v, pods moved %v",
				forceDetachAfter, detached > 0, pluginGone > 0, moved > 0)
		}
		now := time.Since(start)
		if detached == 0 && attachmentsTo(t, drained.name) == 0 {
			detached = now
		}
		if pluginGone == 0 {
			p, err := env.client.CoreV1().Pods(plugin.Namespace).Get(t.Context(), plugin.Name, metav1.GetOptions{})
			if apierrors.IsNotFound(err) || (err == nil && p.UID != plugin.UID) {
				pluginGone = now
			}
		}
		if moved == 0 {
			if n, err := readyPodsOn(t.Context(), ns, other.name); err == nil && n == drainedVolumes {
				moved = now
			}
		}
		time.Sleep(250 * time.Millisecond)
	}
	if err := <-drainDone; err != nil {
		t.Errorf("kubectl drain: %v", err)
	}
	t.Logf("figure: drain of %s with %d mounted volumes: all detached after %s, the old node plugin gone after %s, all %d pods Ready on %s after %s (Kubernetes' forced detach: %s)",
		drained.name, drainedVolumes, detached.Round(100*time.Millisecond), pluginGone.Round(100*time.Millisecond),
		drainedVolumes, other.name, moved.Round(100*time.Millisecond), forceDetachAfter)
	if pluginGone < detached {
		t.Errorf("the old node plugin was gone (%s) before the volumes were detached (%s): its preStop hook did not wait", pluginGone, detached)
	}
}

// readyPodsOn counts the namespace's Ready pods on a node.
func readyPodsOn(ctx context.Context, ns, node string) (int, error) {
	pods, err := env.client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + node})
	if err != nil {
		return 0, err
	}
	n := 0
	for _, p := range pods.Items {
		if poll.PodReady(&p) {
			n++
		}
	}
	return n, nil
}

// attachmentsTo counts the driver's VolumeAttachments to a node.
func attachmentsTo(t *testing.T, node string) int {
	t.Helper()
	vas, err := env.client.StorageV1().VolumeAttachments().List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, va := range vas.Items {
		if va.Spec.NodeName == node && va.Spec.Attacher == env.driverName {
			n++
		}
	}
	return n
}
