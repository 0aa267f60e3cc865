//go:build e2e_multinode

package multinode

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"

	"github.com/diskplane/diskplane/tests/e2e/poll"
)

// stuckWithin is how soon after Kubernetes asks for a detach that a hung
// guest holds up the driver must name it (issue 45: 60 s).
const stuckWithin = 60 * time.Second

// TestHungNode hangs the worker that runs a StatefulSet's pod: every process
// on it stops where it stands, its mounts stay, and EC2 still reports its
// instance running. The node witness must not taint it. A human who takes
// it for dead taints it out-of-service anyway, so Kubernetes deletes the pod
// and asks for the detach, which EC2 cannot finish while the guest holds the
// device: within a minute the driver names it (a DetachStuck event on the
// PersistentVolume and on the Node saying to stop the instance, and the
// pending-detach metric) and forces nothing. Once the instance is stopped
// through EC2 the detach finishes and the pod runs on the other worker of
// the zone with its data. It runs with E2E_MULTINODE_PROFILE=full.
func TestHungNode(t *testing.T) {
	fullProfileOnly(t, "a hung node's stuck detach takes three minutes; the node witness's taint runs in CI")
	zone, pair := zoneWithTwoWorkers(t)
	hung, survivor := pair[0], pair[1]
	if controllerOn(t, hung.name) {
		hung, survivor = survivor, hung
	}
	ns := newNamespace(t, "hung")
	pod := createDataStatefulSet(t, ns, "db", zone, hung.name)
	if pod.Spec.NodeName != hung.name {
		t.Fatalf("the pod went to %s, not the preferred %s", pod.Spec.NodeName, hung.name)
	}
	volumeID := claimVolume(t, ns, "data-db-0")
	pv := claimPV(t, ns, "data-db-0")

	start := time.Now()
	t.Cleanup(func() { restoreWorker(t, hung, true) })
	workerTool(t, "hang", hung)
	waitNode(t, hung.name, false, nodeNotReadyTimeout)
	t.Logf("%s NotReady %s after it hung", hung.name, time.Since(start).Round(time.Second))
	time.Sleep(witnessLook)
	if n, err := env.client.CoreV1().Nodes().Get(t.Context(), hung.name, metav1.GetOptions{}); err != nil || slices.ContainsFunc(n.Spec.Taints, func(t corev1.Taint) bool { return t.Key == outOfService }) {
		t.Fatalf("the hung node, whose instance runs, has taints %+v (%v)", n.Spec.Taints, err)
	}

	// A human's mistake: the taint on a node that still runs.
	setOutOfService(t, hung.name, true)
	t.Cleanup(func() { setOutOfService(t, hung.name, false) })
	asked := detachAsked(t, hung.name, pv)
	t.Logf("Kubernetes asked for the detach of %s from %s %s after the taint", volumeID, hung.name, time.Since(asked).Round(time.Second))
	for _, obj := range []struct{ kind, name string }{{"PersistentVolume", pv}, {"Node", hung.name}} {
		msg, at := waitDetachStuckEvent(t, obj.kind, obj.name, volumeID)
		if !strings.Contains(msg, "stop the instance") || !strings.Contains(msg, hung.instanceID) {
			t.Errorf("DetachStuck on %s %s does not say to stop %s: %q", obj.kind, obj.name, hung.instanceID, msg)
		}
		if at.Sub(asked) > stuckWithin {
			t.Errorf("DetachStuck on %s %s came %s after the detach was asked for, want within %s", obj.kind, obj.name, at.Sub(asked).Round(time.Second), stuckWithin)
		}
		t.Logf("figure: hung node: DetachStuck on the %s %s after the detach was asked for: %s", obj.kind, at.Sub(asked).Round(time.Second), msg)
	}
	waitPendingMetric(t, volumeID, hung.name)
	checkOnlyOn(t, volumeID, hung.name) // nothing forced

	// The one action the event names.
	stop := time.Now()
	workerTool(t, "poweroff", hung)
	pod, _ = waitPodReadyWithin(t, ns, pod.Name, pod.UID, hung.name, podTimeout)
	if pod.Spec.NodeName != survivor.name {
		t.Errorf("the pod runs on %s, want %s", pod.Spec.NodeName, survivor.name)
	}
	checkOnlyOn(t, volumeID, survivor.name)
	neverShared(t, volumeID)
	t.Logf("figure: hung node: the pod ran on %s %s after the instance was stopped", survivor.name, time.Since(stop).Round(time.Second))
}

// claimPV is the name of the PersistentVolume bound to a claim.
func claimPV(t *testing.T, ns, claim string) string {
	t.Helper()
	pvc, err := env.client.CoreV1().PersistentVolumeClaims(ns).Get(t.Context(), claim, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return pvc.Spec.VolumeName
}

// setOutOfService adds or removes the out-of-service taint as a human
// would, without the node witness's annotation.
func setOutOfService(t *testing.T, node string, on bool) {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n, err := env.client.CoreV1().Nodes().Get(context.Background(), node, metav1.GetOptions{})
		if err != nil {
			return err
		}
		n.Spec.Taints = slices.DeleteFunc(n.Spec.Taints, func(t corev1.Taint) bool { return t.Key == outOfService })
		if on {
			n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: outOfService, Value: "nodeshutdown", Effect: corev1.TaintEffectNoExecute})
		}
		_, err = env.client.CoreV1().Nodes().Update(context.Background(), n, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Errorf("node %s: out-of-service taint %t: %v", node, on, err)
	}
}

// detachAsked waits until the VolumeAttachment of the PV on the node is
// being deleted and returns when that was asked.
func detachAsked(t *testing.T, node, pv string) time.Time {
	t.Helper()
	var asked time.Time
	err := poll.Until(t.Context(), 2*time.Minute, func(ctx context.Context) (bool, string, error) {
		vas, err := env.client.StorageV1().VolumeAttachments().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, "", err
		}
		i := slices.IndexFunc(vas.Items, func(va storagev1.VolumeAttachment) bool {
			return va.Spec.NodeName == node && va.Spec.Source.PersistentVolumeName != nil && *va.Spec.Source.PersistentVolumeName == pv
		})
		if i < 0 {
			return false, "", fmt.Errorf("no VolumeAttachment of %s on %s", pv, node)
		}
		if va := vas.Items[i]; va.DeletionTimestamp != nil {
			asked = va.DeletionTimestamp.Time
			return true, "", nil
		}
		return false, "VolumeAttachment " + vas.Items[i].Name + " not being deleted yet", nil
	})
	if err != nil {
		t.Fatalf("the detach of %s from %s: %v", pv, node, err)
	}
	return asked
}

// waitDetachStuckEvent waits for the driver's DetachStuck event on an
// object and returns its message and when it was first recorded.
func waitDetachStuckEvent(t *testing.T, kind, name, volumeID string) (string, time.Time) {
	t.Helper()
	var msg string
	var at time.Time
	err := poll.Until(t.Context(), 2*stuckWithin, func(ctx context.Context) (bool, string, error) {
		events, err := env.client.CoreV1().Events("").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.kind=" + kind + ",involvedObject.name=" + name + ",reason=DetachStuck"})
		if err != nil {
			return false, err.Error(), nil
		}
		for _, e := range events.Items {
			if strings.Contains(e.Message, volumeID) {
				msg, at = e.Message, eventTime(e)
				if !e.FirstTimestamp.IsZero() {
					at = e.FirstTimestamp.Time
				}
				return true, "", nil
			}
		}
		return false, fmt.Sprintf("%d DetachStuck events, none of %s", len(events.Items), volumeID), nil
	})
	if err != nil {
		t.Fatalf("DetachStuck event on %s %s: %v", kind, name, err)
	}
	return msg, at
}

// waitPendingMetric waits until the node witness's leader measures the
// volume's pending detach from the node as detaching or busy.
func waitPendingMetric(t *testing.T, volumeID, node string) {
	t.Helper()
	point := regexp.MustCompile(`(?m)^diskplane_detach_pending_seconds\{[^}]*\} ([0-9.e+]+)$`)
	err := poll.Until(t.Context(), time.Minute, func(ctx context.Context) (bool, string, error) {
		metrics, err := witnessMetrics(ctx)
		if err != nil {
			return false, err.Error(), nil
		}
		for _, m := range point.FindAllStringSubmatch(metrics, -1) {
			if strings.Contains(m[0], `volume_id="`+volumeID+`"`) && strings.Contains(m[0], `node="`+node+`"`) &&
				(strings.Contains(m[0], `state="detaching"`) || strings.Contains(m[0], `state="busy"`)) {
				t.Logf("the node witness's leader measures: %s", m[0])
				return true, "", nil
			}
		}
		return false, "no diskplane_detach_pending_seconds point of " + volumeID, nil
	})
	if err != nil {
		t.Fatalf("pending-detach metric: %v", err)
	}
}
