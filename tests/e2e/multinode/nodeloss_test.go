//go:build e2e_multinode

package multinode

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/diskplane/diskplane/pkg/emulator/model"
	"github.com/diskplane/diskplane/tests/e2e/kubetest"
	"github.com/diskplane/diskplane/tests/e2e/poll"
)

// outOfService is the taint that tells Kubernetes a node is shut down for
// good, so that its pods' volumes may be detached without waiting for it.
const outOfService = "node.kubernetes.io/out-of-service"

// witnessLook is a little more than the node witness's interval: by then
// it has looked at a NotReady node at least once.
const witnessLook = 15 * time.Second

// nodeNotReadyTimeout bounds how long the control plane takes to mark a
// dead node NotReady (the node monitor's grace period, 50 s, and its look).
const nodeNotReadyTimeout = 3 * time.Minute

// lossKind is how a node is lost in TestNodeLoss.
type lossKind int

const (
	// controllersNode: the node runs the leader of every sidecar and of
	// the node witness; it is powered off through EC2.
	controllersNode lossKind = iota
	// poweredOff: a node without a controller replica, powered off
	// through EC2.
	poweredOff
	// killedRunning: the node dies but EC2 still reports its instance
	// running (as in a partition); the pod is force-deleted.
	killedRunning
)

// TestNodeLoss loses the worker that runs a StatefulSet's pod, with the
// pod's volume attached and mounted: its kubelet, containerd, node plugin
// and containers die at once. The pod must run on the other worker of the
// zone with its data, the volume moving between the instances and never
// attached to both.
//   - the controller's node: the worker also runs the controller replica
//     that leads every sidecar and the node witness, and is powered off
//     through EC2 (StopInstances); no one touches the cluster. The other
//     replica takes the Leases over, its node witness sees the Node
//     NotReady and its instance stopped and taints it out-of-service, the
//     dead replica is evicted at once and replaced, and Kubernetes deletes
//     the pod and detaches its volume. When the worker is back the witness
//     takes its taint away.
//   - EC2 as the witness: the same for a worker without a controller
//     replica. It runs with E2E_MULTINODE_PROFILE=full (the controller's
//     node proves the witness in CI).
//   - force-deleted pod, no taint: EC2 still reports the instance running
//     (as in a partition), so nothing taints the node; the pod is
//     force-deleted, and Kubernetes detaches the volume only after its
//     six-minute wait for an unmount the dead node never confirms. It runs
//     with E2E_MULTINODE_PROFILE=full.
func TestNodeLoss(t *testing.T) {
	t.Run("the controller's node, EC2 as the witness", func(t *testing.T) { nodeLoss(t, controllersNode) })
	t.Run("EC2 as the witness", func(t *testing.T) {
		fullProfileOnly(t, "the controller's node proves the witness in CI")
		nodeLoss(t, poweredOff)
	})
	t.Run("force-deleted pod without the taint", func(t *testing.T) {
		fullProfileOnly(t, "waits out Kubernetes' six-minute forced detach")
		nodeLoss(t, killedRunning)
	})
}

// fullProfileOnly skips a scenario outside E2E_MULTINODE_PROFILE=full.
func fullProfileOnly(t *testing.T, why string) {
	t.Helper()
	if os.Getenv("E2E_MULTINODE_PROFILE") != "full" {
		t.Skip(why + "; E2E_MULTINODE_PROFILE=full runs it")
	}
}

func nodeLoss(t *testing.T, kind lossKind) {
	var zone string
	var victim, survivor worker
	if kind == controllersNode {
		zone, victim, survivor = leadersOnOneWorker(t)
	} else {
		var pair []worker
		zone, pair = zoneWithTwoWorkers(t)
		victim, survivor = pair[0], pair[1]
		if controllerOn(t, victim.name) {
			victim, survivor = survivor, victim
		}
		if controllerOn(t, victim.name) {
			t.Fatalf("the controller runs on both workers of %s", zone)
		}
	}
	stopped := kind != killedRunning
	ns := newNamespace(t, "nodeloss")
	pod := createDataStatefulSet(t, ns, "db", zone, victim.name)
	if pod.Spec.NodeName != victim.name {
		t.Fatalf("the pod went to %s, not the preferred %s", pod.Spec.NodeName, victim.name)
	}
	volumeID := claimVolume(t, ns, "data-db-0")
	checkOnlyOn(t, volumeID, victim.name)

	start := time.Now()
	t.Cleanup(func() { restoreWorker(t, victim, stopped) })
	if stopped {
		// The machine is off: its instance stopped through EC2 (a detach
		// no longer waits for its guest), its mounts gone.
		workerTool(t, "poweroff", victim)
	} else {
		workerTool(t, "kill", victim)
		workerTool(t, "down", victim)
	}
	waitNode(t, victim.name, false, nodeNotReadyTimeout)
	t.Logf("%s NotReady %s after it died", victim.name, time.Since(start).Round(time.Second))
	if stopped {
		waitWitnessTaint(t, victim, true)
		t.Logf("%s tainted out-of-service by the node witness %s after it died", victim.name, time.Since(start).Round(time.Second))
	} else {
		grace := int64(0)
		if err := env.client.CoreV1().Pods(ns).Delete(t.Context(), pod.Name, metav1.DeleteOptions{GracePeriodSeconds: &grace}); err != nil {
			t.Fatal(err)
		}
	}
	pod, _ = waitPodReadyWithin(t, ns, pod.Name, pod.UID, victim.name, 12*time.Minute)
	if pod.Spec.NodeName != survivor.name {
		t.Errorf("the pod runs on %s, want %s", pod.Spec.NodeName, survivor.name)
	}
	moved := time.Since(start)
	checkOnlyOn(t, volumeID, survivor.name)
	neverShared(t, volumeID)
	if kind == controllersNode {
		waitControllersElsewhere(t, victim.name)
		t.Logf("two controller replicas Ready, none on %s, %s after it died", victim.name, time.Since(start).Round(time.Second))
	}
	t.Logf("figure: node loss (%s): the pod ran on %s %s after %s died (floor: node monitor grace 50 s + detach + attach = %s)",
		map[lossKind]string{controllersNode: "the controller leader's node, powered off, EC2 as the witness",
			poweredOff: "powered off, EC2 as the witness", killedRunning: "force delete, six-minute forced detach"}[kind],
		survivor.name, moved.Round(time.Second), victim.name, 50*time.Second+moveFloor())
}

// waitPodReadyWithin is waitPodReady with its own bound: a node loss
// without the out-of-service taint waits out Kubernetes' six minutes.
func waitPodReadyWithin(t *testing.T, ns, name string, old types.UID, notOn string, timeout time.Duration) (*corev1.Pod, time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), timeout)
	defer cancel()
	start := time.Now()
	var pod *corev1.Pod
	err := poll.Until(ctx, timeout, func(ctx context.Context) (bool, string, error) {
		p, err := env.client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			// Not found while the StatefulSet makes the next pod.
			return false, err.Error(), nil
		}
		if p.UID == old || (notOn != "" && p.Spec.NodeName == notOn) {
			return false, "still the old pod on " + p.Spec.NodeName, nil
		}
		pod = p
		return poll.PodReady(p), fmt.Sprintf("%s on %q: %s", p.Status.Phase, p.Spec.NodeName, podEvents(ctx, ns, name)), nil
	})
	if err != nil {
		t.Fatalf("pod %s/%s: %v", ns, name, err)
	}
	return pod, time.Since(start)
}

// controllerOn reports whether a Diskplane controller pod runs on the node.
func controllerOn(t *testing.T, node string) bool {
	t.Helper()
	pods, err := env.client.CoreV1().Pods("").List(t.Context(), metav1.ListOptions{
		LabelSelector: "app.kubernetes.io/name=diskplane,app.kubernetes.io/component=controller",
		FieldSelector: "spec.nodeName=" + node,
	})
	if err != nil {
		t.Fatal(err)
	}
	return len(pods.Items) > 0
}

// waitNode waits until the node's Ready condition is ready.
func waitNode(t *testing.T, node string, ready bool, timeout time.Duration) {
	t.Helper()
	err := poll.Until(t.Context(), timeout, func(ctx context.Context) (bool, string, error) {
		n, err := env.client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		return nodeReady(n) == ready, fmt.Sprintf("Ready=%t", nodeReady(n)), nil
	})
	if err != nil {
		t.Fatalf("node %s Ready=%t: %v", node, ready, err)
	}
}

// witnessAnnotation marks the node witness's own out-of-service taint.
const witnessAnnotation = "/out-of-service-witness"

// waitWitnessTaint waits until the controller's node witness has tainted
// the worker out-of-service, with its evidence and its event (tainted), or
// has taken the taint and its annotation away (!tainted).
func waitWitnessTaint(t *testing.T, w worker, tainted bool) {
	t.Helper()
	// Not the test's context: restoreWorker, a cleanup, waits too.
	err := poll.Until(context.Background(), 2*time.Minute, func(ctx context.Context) (bool, string, error) {
		n, err := env.client.CoreV1().Nodes().Get(ctx, w.name, metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		evidence, ours := n.Annotations[env.driverName+witnessAnnotation]
		has := slices.ContainsFunc(n.Spec.Taints, func(t corev1.Taint) bool {
			return t.Key == outOfService && t.Value == "nodeshutdown" && t.Effect == corev1.TaintEffectNoExecute
		})
		if !tainted {
			return !has && !ours, fmt.Sprintf("taints %v, annotation %q", n.Spec.Taints, evidence), nil
		}
		if !has || !strings.Contains(evidence, w.instanceID+" stopped") {
			return false, fmt.Sprintf("taints %v, annotation %q", n.Spec.Taints, evidence), nil
		}
		events, err := env.client.CoreV1().Events("").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.kind=Node,involvedObject.name=" + w.name + ",reason=OutOfServiceTaintAdded"})
		if err != nil {
			return false, "", err
		}
		return len(events.Items) > 0, "no OutOfServiceTaintAdded event on the Node yet", nil
	})
	if err != nil {
		t.Fatalf("node %s: the node witness's taint (want present: %t): %v", w.name, tainted, err)
	}
}

// restoreWorker brings a worker a test killed back: a fresh start of its
// namespaces, its instance running, the node Ready with its node plugin
// registered again and (when its instance was stopped) the node witness's
// taint gone, so that the next test finds the cluster whole.
func restoreWorker(t *testing.T, w worker, stopped bool) {
	t.Helper()
	if _, err := kubetest.Run(context.Background(), env.workerTool, "down", w.index); err != nil {
		t.Errorf("restore %s: %v", w.name, err)
	}
	if err := env.emulator.SetInstanceState(context.Background(), w.instanceID, model.InstanceRunning); err != nil {
		t.Errorf("restore %s: %v", w.name, err)
	}
	if _, err := kubetest.Run(context.Background(), env.workerTool, "up", w.index); err != nil {
		t.Errorf("restore %s: %v", w.name, err)
		return
	}
	// The CSINode still lists the driver from before: the node plugin pod
	// must be Ready again since the restart.
	restarted := time.Now().Add(-time.Second)
	err := poll.Until(context.Background(), podTimeout, func(ctx context.Context) (bool, string, error) {
		n, err := env.client.CoreV1().Nodes().Get(ctx, w.name, metav1.GetOptions{})
		if err != nil || !nodeReady(n) {
			return false, "node not Ready", err
		}
		pods, err := env.client.CoreV1().Pods("").List(ctx, metav1.ListOptions{
			LabelSelector: "app.kubernetes.io/name=diskplane,app.kubernetes.io/component=node",
			FieldSelector: "spec.nodeName=" + w.name,
		})
		if err != nil {
			return false, "", err
		}
		for _, p := range pods.Items {
			if readySince(&p, restarted) {
				return true, "", nil
			}
		}
		return false, "no node plugin Ready since the restart", nil
	})
	if err != nil {
		t.Errorf("restore %s: %v", w.name, err)
		return
	}
	if stopped {
		waitWitnessTaint(t, w, false)
	}
}

// readySince reports whether a pod became Ready after t.
func readySince(p *corev1.Pod, t time.Time) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue && c.LastTransitionTime.After(t)
		}
	}
	return false
}

// TestNetworkPartition cuts the worker that runs a StatefulSet's pod off the
// API server until the control plane marks it NotReady, then heals the cut:
// the pod kept running on its node all along (its containers never stopped),
// so its volume must stay attached to that node's instance and only to it,
// and the pod must be Ready there again with its data. A partition shorter
// than the pods' unreachable toleration (300 s) must cost no detach.
func TestNetworkPartition(t *testing.T) {
	zone, pair := zoneWithTwoWorkers(t)
	cut := pair[0]
	if controllerOn(t, cut.name) {
		cut = pair[1]
	}
	ns := newNamespace(t, "partition")
	pod := createDataStatefulSet(t, ns, "db", zone, cut.name)
	if pod.Spec.NodeName != cut.name {
		t.Fatalf("the pod went to %s, not the preferred %s", pod.Spec.NodeName, cut.name)
	}
	volumeID := claimVolume(t, ns, "data-db-0")
	start := time.Now()
	workerTool(t, "cut", cut)
	t.Cleanup(func() {
		if _, err := kubetest.Run(context.Background(), env.workerTool, "uncut", cut.index); err != nil {
			t.Errorf("uncut %s: %v", cut.name, err)
		}
	})
	waitNode(t, cut.name, false, nodeNotReadyTimeout)
	t.Logf("%s NotReady %s after the cut", cut.name, time.Since(start).Round(time.Second))
	checkOnlyOn(t, volumeID, cut.name)
	// EC2 reports its instance running: the node witness leaves it be.
	time.Sleep(witnessLook)
	if n, err := env.client.CoreV1().Nodes().Get(t.Context(), cut.name, metav1.GetOptions{}); err != nil || slices.ContainsFunc(n.Spec.Taints, func(t corev1.Taint) bool { return t.Key == outOfService }) {
		t.Errorf("the cut node, whose instance runs, has taints %+v (%v)", n.Spec.Taints, err)
	}
	workerTool(t, "uncut", cut)
	waitNode(t, cut.name, true, nodeNotReadyTimeout)
	again, _ := waitPodReady(t, ns, pod.Name, "", "")
	if again.UID != pod.UID || again.Spec.NodeName != cut.name {
		t.Errorf("after the partition the pod is %s on %s, want the same pod %s on %s", again.UID, again.Spec.NodeName, pod.UID, cut.name)
	}
	checkOnlyOn(t, volumeID, cut.name)
	neverShared(t, volumeID)
	t.Logf("figure: a partition of %s from the API server for %s: the pod and its volume stayed", cut.name, time.Since(start).Round(time.Second))
}
