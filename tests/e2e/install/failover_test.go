//go:build e2e_install

package install

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// controllerSidecars are the controller's sidecars that elect a leader,
// each with a Lease of its own.
var controllerSidecars = []string{"csi-provisioner", "csi-attacher", "csi-resizer", "csi-snapshotter"}

// TestLeaderFailover runs the controller as production does, with two
// replicas (the chart's default; the local values run one), and takes the
// leader away the way a node drain does, through the Eviction API: the
// PodDisruptionBudget lets one replica go and refuses the second eviction;
// every Lease the evicted replica held passes to another replica; and the
// new leaders provision and attach a volume for a pod. The soft
// anti-affinity of the chart lets both replicas run on the one node.
func TestLeaderFailover(t *testing.T) {
	ctx := t.Context()
	scaleController(t, 2)
	pods, err := controllerPods(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(pods) != 2 {
		t.Fatalf("%d controller pods run, want 2", len(pods))
	}
	waitFor(t, "the PodDisruptionBudget to allow one disruption of two healthy replicas", rolloutTimeout,
		func(ctx context.Context) (bool, string, error) {
			pdb, err := env.client.PolicyV1().PodDisruptionBudgets(env.namespace).Get(ctx, controllerName, metav1.GetOptions{})
			if err != nil {
				return false, "", err
			}
			st := pdb.Status
			return st.ExpectedPods == 2 && st.CurrentHealthy == 2 && st.DisruptionsAllowed == 1,
				fmt.Sprintf("expected %d healthy %d allowed %d", st.ExpectedPods, st.CurrentHealthy, st.DisruptionsAllowed), nil
		})

	var held map[string]string
	waitFor(t, "a leader for each sidecar", rolloutTimeout, func(ctx context.Context) (bool, string, error) {
		var err error
		held, err = sidecarLeases(ctx, pods)
		return len(held) >= len(controllerSidecars), fmt.Sprintf("leases held: %v", held), err
	})
	leader := busiestHolder(held)
	var other string
	for _, p := range pods {
		if p != leader {
			other = p
		}
	}
	t.Logf("leases %v; evicting %s", held, leader)

	start := time.Now()
	if err := evict(ctx, leader); err != nil {
		t.Fatalf("evict the leader %s: %v", leader, err)
	}
	if err := evict(ctx, other); !apierrors.IsTooManyRequests(err) {
		t.Fatalf("evicting the second replica %s right after the first: %v, want 429 from the PodDisruptionBudget", other, err)
	}
	waitFor(t, "every lease of "+leader+" held by another replica", rolloutTimeout,
		func(ctx context.Context) (bool, string, error) {
			now, err := controllerPods(ctx)
			if err != nil {
				return false, "", err
			}
			after, err := sidecarLeases(ctx, now)
			if err != nil {
				return false, "", err
			}
			for lease := range held {
				if holder := after[lease]; holder == "" || holder == leader {
					return false, fmt.Sprintf("lease %s held by %q", lease, holder), nil
				}
			}
			return true, "", nil
		})
	t.Logf("leadership moved %s after the eviction", time.Since(start).Round(100*time.Millisecond))

	// The new leaders work: a claim is provisioned and attached for a pod.
	class := claimStorageClass(t)
	ns := newNamespace(t, "install-failover")
	createClaim(t, ns, class, "1Gi")
	if _, err := env.client.CoreV1().Pods(ns).Create(ctx, writerPod("failover-"+ns), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	podReady(t, ns, "app")
	t.Logf("after the failover, claim %s/data got volume %s, attached and mounted", ns, boundVolume(t, ns, "data"))
}

// scaleController sets the controller's replica count the way the install
// method does it (helm upgrade, or kubectl scale for kustomize) and waits
// for the rollout.
func scaleController(t *testing.T, replicas int) {
	t.Helper()
	n := fmt.Sprint(replicas)
	var err error
	if env.method == byHelm {
		_, err = helm(t.Context(), "upgrade", env.release, env.repo+"/charts/diskplane", "--namespace", env.namespace,
			"--reuse-values", "--set", "controller.replicas="+n)
	} else {
		_, err = kubectl(t.Context(), "-n", env.namespace, "scale", "deployment/"+controllerName, "--replicas="+n)
	}
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the controller at "+n+" Ready replicas", rolloutTimeout, rolledOut)
}

// controllerPods names the controller's pods that are not being deleted.
func controllerPods(ctx context.Context) ([]string, error) {
	list, err := env.client.CoreV1().Pods(env.namespace).List(ctx, metav1.ListOptions{
		LabelSelector: appSelector + ",app.kubernetes.io/component=controller"})
	if err != nil {
		return nil, err
	}
	var names []string
	for _, p := range list.Items {
		if p.DeletionTimestamp == nil {
			names = append(names, p.Name)
		}
	}
	return names, nil
}

// sidecarLeases maps each Lease of the namespace held by one of pods to
// its holder. The sidecars name themselves after their pod (the host name),
// possibly with a suffix.
func sidecarLeases(ctx context.Context, pods []string) (map[string]string, error) {
	list, err := env.client.CoordinationV1().Leases(env.namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	held := map[string]string{}
	for _, l := range list.Items {
		if holder := leaseHolder(l, pods); holder != "" {
			held[l.Name] = holder
		}
	}
	return held, nil
}

func leaseHolder(l coordinationv1.Lease, pods []string) string {
	if l.Spec.HolderIdentity == nil {
		return ""
	}
	for _, p := range pods {
		if strings.HasPrefix(*l.Spec.HolderIdentity, p) {
			return p
		}
	}
	return ""
}

// busiestHolder is the pod that holds the most leases (ties: the first by
// name), the one whose loss moves the most leadership.
func busiestHolder(held map[string]string) string {
	count := map[string]int{}
	var pods []string
	for _, p := range held {
		if count[p] == 0 {
			pods = append(pods, p)
		}
		count[p]++
	}
	slices.Sort(pods)
	best := pods[0]
	for _, p := range pods {
		if count[p] > count[best] {
			best = p
		}
	}
	return best
}

// evict asks the Eviction API to remove a controller pod, as kubectl drain
// does; the PodDisruptionBudget may refuse with 429.
func evict(ctx context.Context, pod string) error {
	return env.client.PolicyV1().Evictions(env.namespace).Evict(ctx, &policyv1.Eviction{
		ObjectMeta: metav1.ObjectMeta{Name: pod, Namespace: env.namespace}})
}
