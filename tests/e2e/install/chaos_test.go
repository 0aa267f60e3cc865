//go:build e2e_install

package install

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/diskplane/diskplane/pkg/emulator/admin"
	"github.com/diskplane/diskplane/tests/e2e/kubetest"
	"github.com/diskplane/diskplane/tests/e2e/poll"
)

// chaosProfile sizes TestClaimsUnderChaos.
type chaosProfile struct {
	claims int
	// atOnce bounds the claims in use together: their pods share the one
	// node, whose attachment slots are few.
	atOnce int
	// kills is how many times the controller pod is killed, every minGap
	// to maxGap.
	kills          int
	minGap, maxGap time.Duration
}

// chaosProfiles are the full run (E2E_CHAOS=full) and CI's (the default).
var chaosProfiles = map[string]chaosProfile{
	"full": {claims: 100, atOnce: 12, kills: 10, minGap: 15 * time.Second, maxGap: 35 * time.Second},
	"ci":   {claims: 24, atOnce: 8, kills: 3, minGap: 15 * time.Second, maxGap: 30 * time.Second},
}

// chaosPodTimeout bounds how long a claim's pod may take to run: the
// controller may be dead for a while (a new pod's sidecars wait out the
// leases of the killed one's).
const chaosPodTimeout = 10 * time.Minute

// TestClaimsUnderChaos runs claims with pods, as a user does, while the
// controller pod is killed again and again (force-deleted, as a node losing
// it would) and 5 % of EC2 calls fail: every pod must reach Running, and
// every claim deleted must leave no EC2 volume.
func TestClaimsUnderChaos(t *testing.T) {
	name := kubetest.EnvOr("E2E_CHAOS", "ci")
	p, ok := chaosProfiles[name]
	if !ok {
		t.Fatalf("E2E_CHAOS=%s: want full or ci", name)
	}
	emu := &admin.Client{URL: kubetest.EnvOr("E2E_EMULATOR_ADMIN", "http://127.0.0.1:8702")}
	before, err := emu.Faults(t.Context())
	if err != nil {
		t.Fatalf("the EC2 emulator's admin API: %v", err)
	}
	if err := emu.PatchFaults(t.Context(), `{"errors": [{"action": "*", "code": "InternalError", "probability": 0.025}, {"action": "*", "code": "Unavailable", "probability": 0.025}]}`); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := emu.SetFaults(context.Background(), before); err != nil {
			t.Errorf("restore the emulator's faults: %v", err)
		}
	})
	class := claimStorageClass(t)
	ns := newNamespace(t, "install-chaos")
	t.Logf("profile %s: %d claims, %d at once, the controller killed %d times", name, p.claims, p.atOnce, p.kills)

	started := time.Now()
	workCtx, stopKilling := context.WithCancel(t.Context())
	killed := make(chan int, 1)
	go func() { killed <- killControllerPods(t, workCtx, p) }()

	errs := make([]error, p.claims)
	work := make(chan int)
	var wg sync.WaitGroup
	for range p.atOnce {
		wg.Go(func() {
			for i := range work {
				errs[i] = claimLifecycle(t.Context(), ns, class, i)
			}
		})
	}
	for i := range p.claims {
		work <- i
	}
	close(work)
	wg.Wait()
	stopKilling()
	kills := <-killed
	t.Logf("%d claims in %s, the controller pod killed %d times", p.claims, time.Since(started).Round(time.Second), kills)
	if err := errors.Join(errs...); err != nil {
		t.Error(err)
	}
	if kills < p.kills {
		t.Errorf("the controller pod was killed %d times, fewer than the profile's %d: the claims ran faster than the kills came", kills, p.kills)
	}
	left, err := volumesOfNamespace(t.Context(), emu, ns)
	if err != nil {
		t.Fatal(err)
	}
	if len(left) > 0 {
		t.Errorf("EC2 volumes of the deleted claims are still there: %v", left)
	}
}

// claimLifecycle is one claim's life: the claim and a pod using it, the pod
// Running (provisioned, attached, formatted, mounted), then both deleted
// and the claim's volume gone.
func claimLifecycle(ctx context.Context, ns, class string, i int) error {
	claim, podName := fmt.Sprintf("data-%03d", i), fmt.Sprintf("app-%03d", i)
	core := env.client.CoreV1()
	_, err := core.PersistentVolumeClaims(ns).Create(ctx, &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: claim},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			StorageClassName: &class,
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("claim %s: %w", claim, err)
	}
	pod := writerPod(podName)
	pod.Name = podName
	pod.Spec.Volumes[0].PersistentVolumeClaim.ClaimName = claim
	if _, err := core.Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("pod %s: %w", podName, err)
	}
	err = poll.Until(ctx, chaosPodTimeout, func(ctx context.Context) (bool, string, error) {
		p, err := core.Pods(ns).Get(ctx, podName, metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		if err := poll.PodEnded(p); err != nil {
			return false, "", err
		}
		return poll.PodReady(p), string(p.Status.Phase), nil
	})
	if err != nil {
		return fmt.Errorf("pod %s never ran: %w", podName, err)
	}
	c, err := core.PersistentVolumeClaims(ns).Get(ctx, claim, metav1.GetOptions{})
	if err != nil {
		return err
	}
	grace := int64(1)
	if err := core.Pods(ns).Delete(ctx, podName, metav1.DeleteOptions{GracePeriodSeconds: &grace}); err != nil {
		return err
	}
	if err := gone(ctx, "pod "+podName, func(ctx context.Context) error {
		_, err := core.Pods(ns).Get(ctx, podName, metav1.GetOptions{})
		return err
	}); err != nil {
		return err
	}
	if err := core.PersistentVolumeClaims(ns).Delete(ctx, claim, metav1.DeleteOptions{}); err != nil {
		return err
	}
	return gone(ctx, "volume "+c.Spec.VolumeName+" of claim "+claim, func(ctx context.Context) error {
		_, err := core.PersistentVolumes().Get(ctx, c.Spec.VolumeName, metav1.GetOptions{})
		return err
	})
}

// gone waits until get answers NotFound.
func gone(ctx context.Context, what string, get func(context.Context) error) error {
	err := poll.Until(ctx, chaosPodTimeout, func(ctx context.Context) (bool, string, error) {
		err := get(ctx)
		if apierrors.IsNotFound(err) {
			return true, "", nil
		}
		return false, "still there", err
	})
	if err != nil {
		return fmt.Errorf("%s never went: %w", what, err)
	}
	return nil
}

// killControllerPods force-deletes the controller pod that leads the most
// sidecars, every minGap to maxGap, until ctx ends or the profile's kills
// are done, and reports how many it killed.
func killControllerPods(t *testing.T, ctx context.Context, p chaosProfile) int {
	kills := 0
	for kills < p.kills {
		select {
		case <-ctx.Done():
			return kills
		case <-time.After(p.minGap + rand.N(p.maxGap-p.minGap+1)):
		}
		pods, err := controllerPods(ctx)
		if err != nil || len(pods) == 0 {
			t.Logf("no controller pod to kill now (%v)", err)
			continue
		}
		victim := pods[0]
		if held, err := sidecarLeases(ctx, pods); err == nil && len(held) > 0 {
			victim = busiestHolder(held)
		}
		zero := int64(0)
		if err := env.client.CoreV1().Pods(env.namespace).Delete(ctx, victim, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
			t.Logf("kill controller pod %s: %v", victim, err)
			continue
		}
		kills++
		t.Logf("killed controller pod %s (%d)", victim, kills)
	}
	return kills
}

// volumesOfNamespace lists the EC2 volumes made for claims of the
// namespace that are not being deleted.
func volumesOfNamespace(ctx context.Context, emu *admin.Client, ns string) ([]string, error) {
	vols, err := emu.Volumes(ctx)
	if err != nil {
		return nil, err
	}
	var left []string
	for _, v := range vols {
		if v.Tags["kubernetes.io/created-for/pvc/namespace"] == ns && v.State != "deleting" {
			left = append(left, fmt.Sprintf("%s (%s, %s)", v.ID, v.Tags["kubernetes.io/created-for/pvc/name"], v.State))
		}
	}
	return left, nil
}
