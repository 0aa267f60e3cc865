//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/diskplane/diskplane/tests/e2e/poll"
)

// Generous bounds for what takes seconds here: scheduling, provisioning
// (the emulator's creating state), attaching, formatting and mounting. They
// only bound a wait; no test asserts how long anything took.
const (
	podTimeout      = 4 * time.Minute
	bindTimeout     = 3 * time.Minute
	snapshotTimeout = 3 * time.Minute
)

// podReady waits until the pod is Ready and returns it; a pod that failed
// ends the wait at once.
func (sc *scenario) podReady(name string) *corev1.Pod {
	sc.t.Helper()
	var pod *corev1.Pod
	sc.waitFor("pod "+name+" Ready", podTimeout, func(ctx context.Context) (bool, string, error) {
		p, err := env.client.CoreV1().Pods(sc.ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		pod = p
		if err := poll.PodEnded(p); err != nil {
			return false, "", err
		}
		if poll.PodReady(p) {
			return true, "", nil
		}
		return false, podState(p), nil
	})
	return pod
}

func podState(p *corev1.Pod) string {
	s := []string{string(p.Status.Phase)}
	for _, c := range p.Status.Conditions {
		if c.Status != corev1.ConditionTrue && c.Message != "" {
			s = append(s, fmt.Sprintf("%s: %s", c.Type, c.Message))
		}
	}
	for _, c := range p.Status.ContainerStatuses {
		if w := c.State.Waiting; w != nil {
			s = append(s, fmt.Sprintf("container %s waiting: %s %s", c.Name, w.Reason, w.Message))
		}
	}
	return strings.Join(s, "; ")
}

// claimBound waits until the claim is bound and returns it with its volume.
func (sc *scenario) claimBound(name string) (*corev1.PersistentVolumeClaim, *corev1.PersistentVolume) {
	sc.t.Helper()
	var pvc *corev1.PersistentVolumeClaim
	sc.waitFor("claim "+name+" Bound", bindTimeout, func(ctx context.Context) (bool, string, error) {
		c, err := env.client.CoreV1().PersistentVolumeClaims(sc.ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		pvc = c
		return c.Status.Phase == corev1.ClaimBound, string(c.Status.Phase), nil
	})
	pv, err := env.client.CoreV1().PersistentVolumes().Get(sc.t.Context(), pvc.Spec.VolumeName, metav1.GetOptions{})
	if err != nil {
		sc.t.Fatalf("get the volume %s of claim %s: %v", pvc.Spec.VolumeName, name, err)
	}
	if pv.Spec.CSI == nil || pv.Spec.CSI.Driver != env.driverName {
		sc.t.Fatalf("volume %s of claim %s is not a %s volume: %+v", pv.Name, name, env.driverName, pv.Spec.PersistentVolumeSource)
	}
	return pvc, pv
}

// claim returns the claim as it is now.
func (sc *scenario) claim(name string) *corev1.PersistentVolumeClaim {
	sc.t.Helper()
	c, err := env.client.CoreV1().PersistentVolumeClaims(sc.ns).Get(sc.t.Context(), name, metav1.GetOptions{})
	if err != nil {
		sc.t.Fatalf("get claim %s: %v", name, err)
	}
	return c
}

// deletePod deletes a pod and waits until it is gone, i.e. until the kubelet
// has unmounted its volumes.
func (sc *scenario) deletePod(name string) {
	sc.t.Helper()
	grace := int64(1)
	err := env.client.CoreV1().Pods(sc.ns).Delete(sc.t.Context(), name, metav1.DeleteOptions{GracePeriodSeconds: &grace})
	if err != nil {
		sc.t.Fatalf("delete pod %s: %v", name, err)
	}
	sc.waitFor("pod "+name+" gone", podTimeout, func(ctx context.Context) (bool, string, error) {
		_, err := env.client.CoreV1().Pods(sc.ns).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, "", nil
		}
		return false, "still there", err
	})
}
