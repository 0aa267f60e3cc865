//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// TestVolumeAttributesClass moves the gp3 claim of
// examples/dynamic-provisioning to the class of
// examples/volume-attributes-class (io2, 4000 IOPS) while its pod runs:
// the claim reports the new class, the EC2 volume has become io2 with 4000
// IOPS, and the pod's data and mount are untouched.
func TestVolumeAttributesClass(t *testing.T) {
	t.Parallel()
	sc := newScenario(t)
	sc.create(sc.example("dynamic-provisioning")...)
	pod := sc.podReady("app")
	_, pv := sc.claimBound("diskplane-claim")
	if vol := checkAttachedVolume(t, pv, 4); vol.Iops != 3000 {
		t.Errorf("EC2 volume %s has %d IOPS before the change, want gp3's 3000", vol.ID, vol.Iops)
	}
	sc.exec("app", "echo before-modify > /data/marker && sync")

	m := sc.example("volume-attributes-class")
	vac := m.get(t, "VolumeAttributesClass")
	sc.create(vac)
	patch := fmt.Appendf(nil, `{"spec":{"volumeAttributesClassName":%q}}`, vac.GetName())
	_, err := env.client.CoreV1().PersistentVolumeClaims(sc.ns).Patch(t.Context(), "diskplane-claim",
		types.MergePatchType, patch, metav1.PatchOptions{})
	if err != nil {
		t.Fatalf("set the claim's VolumeAttributesClass: %v", err)
	}
	sc.waitFor("the claim to report class "+vac.GetName(), bindTimeout, func(ctx context.Context) (bool, string, error) {
		c, err := env.client.CoreV1().PersistentVolumeClaims(sc.ns).Get(ctx, "diskplane-claim", metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		cur := c.Status.CurrentVolumeAttributesClassName
		state := fmt.Sprintf("current class %v, modify status %+v", deref(cur), c.Status.ModifyVolumeStatus)
		return cur != nil && *cur == vac.GetName() && c.Status.ModifyVolumeStatus == nil, state, nil
	})
	vol := env.emulator.volume(t, pv.Spec.CSI.VolumeHandle)
	if vol.Type != "io2" || vol.Iops != 4000 || vol.Size != 4 {
		t.Fatalf("EC2 volume %s is %s with %d IOPS, %d GiB after the change; want io2 with 4000 IOPS, 4 GiB",
			vol.ID, vol.Type, vol.Iops, vol.Size)
	}
	if got := strings.TrimSpace(sc.exec("app", "cat /data/marker")); got != "before-modify" {
		t.Fatalf("after the change /data/marker holds %q", got)
	}
	p, err := env.client.CoreV1().Pods(sc.ns).Get(t.Context(), "app", metav1.GetOptions{})
	if err != nil || p.UID != pod.UID || p.Status.ContainerStatuses[0].RestartCount != 0 {
		t.Fatalf("the pod was not left running through the change: %v", err)
	}
}

func deref(s *string) string {
	if s == nil {
		return "<none>"
	}
	return *s
}
