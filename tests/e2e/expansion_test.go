//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// TestOnlineExpansion grows the claim of examples/resizing (xfs) from 4 to
// 8 GiB while its pod runs: the EC2 volume grows, the claim reports the new
// capacity, and the pod's df shows the larger filesystem without a restart.
// (The example uses xfs because this sandbox lacks CAP_SYS_RESOURCE, which
// growing a mounted ext4 needs; see tests/e2e/README.md.)
func TestOnlineExpansion(t *testing.T) {
	t.Parallel()
	sc := newScenario(t)
	m := sc.example("resizing")
	sc.create(m...)
	pod := sc.podReady("resizable-app")
	_, pv := sc.claimBound("diskplane-resizable-claim")
	checkAttachedVolume(t, pv, 4)
	before := dfKiB(t, sc, pod.Name)
	sc.exec(pod.Name, "echo before-expansion > /data/marker && sync")

	patch := []byte(`{"spec":{"resources":{"requests":{"storage":"8Gi"}}}}`)
	_, err := env.client.CoreV1().PersistentVolumeClaims(sc.ns).Patch(t.Context(), "diskplane-resizable-claim",
		types.MergePatchType, patch, metav1.PatchOptions{})
	if err != nil {
		t.Fatalf("grow the claim: %v", err)
	}
	want := resource.MustParse("8Gi")
	sc.waitFor("the claim to report 8Gi", bindTimeout, func(ctx context.Context) (bool, string, error) {
		c, err := env.client.CoreV1().PersistentVolumeClaims(sc.ns).Get(ctx, "diskplane-resizable-claim", metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		got := c.Status.Capacity[corev1.ResourceStorage]
		var conds []string
		for _, cond := range c.Status.Conditions {
			conds = append(conds, fmt.Sprintf("%s=%s %s", cond.Type, cond.Status, cond.Message))
		}
		return got.Cmp(want) == 0 && len(c.Status.Conditions) == 0,
			fmt.Sprintf("capacity %s, conditions %v", got.String(), conds), nil
	})
	if vol := env.emulator.volume(t, pv.Spec.CSI.VolumeHandle); vol.Size != 8 {
		t.Errorf("EC2 volume %s is %d GiB after the expansion, want 8", vol.ID, vol.Size)
	}
	after := dfKiB(t, sc, pod.Name)
	// The filesystem takes some of the volume for itself: it must have
	// grown by most of the 4 GiB added.
	if after-before < 3*1024*1024 {
		t.Fatalf("the pod's /data is %d KiB after the expansion, %d KiB before; want about 4 GiB more", after, before)
	}
	if got := strings.TrimSpace(sc.exec(pod.Name, "cat /data/marker")); got != "before-expansion" {
		t.Fatalf("after the expansion /data/marker holds %q", got)
	}
	p, err := env.client.CoreV1().Pods(sc.ns).Get(t.Context(), pod.Name, metav1.GetOptions{})
	if err != nil || p.UID != pod.UID || p.Status.ContainerStatuses[0].RestartCount != 0 {
		t.Fatalf("the pod was not left running through the expansion: %v", err)
	}
}

// dfKiB returns the size of the pod's /data filesystem in KiB.
func dfKiB(t *testing.T, sc *scenario, pod string) int64 {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(sc.exec(pod, "df -k /data")), "\n")
	fields := strings.Fields(lines[len(lines)-1])
	if len(fields) < 2 {
		t.Fatalf("df -k /data: %q", lines)
	}
	n, err := strconv.ParseInt(fields[1], 10, 64)
	if err != nil {
		t.Fatalf("df -k /data: %q: %v", lines, err)
	}
	return n
}
