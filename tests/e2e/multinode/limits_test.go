//go:build e2e_multinode

package multinode

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/diskplane/diskplane/tests/e2e/poll"
)

// attachmentLimits is how many volumes the driver may attach to a fresh
// worker of each instance type the cluster uses, worked out from EC2's
// documentation rather than from the driver's table: a Nitro type with the
// shared pool has 28 slots for EBS volumes and network interfaces together,
// less the one network interface and the root volume every worker has.
var attachmentLimits = map[string]int32{
	"m5.large":  28 - 1 - 1,
	"t3.medium": 28 - 1 - 1,
	"c5.xlarge": 28 - 1 - 1,
}

// TestAttachLimits checks that every worker's CSINode allows the volumes its
// instance type can hold. With E2E_MULTINODE_PROFILE=full it also fills one
// worker: as many pods with a volume each as it allows, all Running, and one
// more that stays Pending with the scheduler's reason, never failing to
// attach.
func TestAttachLimits(t *testing.T) {
	for _, w := range env.workers {
		want, ok := attachmentLimits[w.typ]
		if !ok {
			t.Fatalf("%s is a %s: add its limit to attachmentLimits", w.name, w.typ)
		}
		if got := allocatable(t, w.name); got != want {
			t.Errorf("%s (%s): CSINode allows %d volumes, want %d", w.name, w.typ, got, want)
		}
	}
	if os.Getenv("E2E_MULTINODE_PROFILE") != "full" {
		t.Log("E2E_MULTINODE_PROFILE=full also fills a worker to its limit")
		return
	}
	zone, pair := zoneWithTwoWorkers(t)
	full, other := pair[0], pair[1]
	limit := allocatable(t, full.name)
	ns := newNamespace(t, "limits")
	// The other worker of the zone is cordoned, so that every pod must go
	// to the one being filled (the pods are confined to the zone).
	cordon(t, other.name, true)
	defer cordon(t, other.name, false)
	set := manyStatefulSet("fill", zone, full.name, limit+1)
	if _, err := env.client.AppsV1().StatefulSets(ns).Create(t.Context(), set, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	err := poll.Until(t.Context(), 3*podTimeout, func(ctx context.Context) (bool, string, error) {
		pods, err := env.client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, "", err
		}
		ready, pending, reason := int32(0), 0, ""
		for _, p := range pods.Items {
			switch {
			case poll.PodReady(&p):
				ready++
			case p.Spec.NodeName == "":
				pending++
				reason = podEvents(ctx, ns, p.Name)
			}
		}
		state := fmt.Sprintf("%d of %d Ready, %d unscheduled: %s", ready, limit, pending, reason)
		return ready == limit && pending == 1 && strings.Contains(reason, "max volume count"), state, nil
	})
	if err != nil {
		t.Fatalf("filling %s with %d volumes: %v", full.name, limit, err)
	}
	attachFailures, err := env.client.CoreV1().Events(ns).List(t.Context(), metav1.ListOptions{FieldSelector: "reason=FailedAttachVolume"})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(attachFailures.Items); n > 0 {
		t.Errorf("%d FailedAttachVolume events, first: %s", n, attachFailures.Items[0].Message)
	}
	t.Logf("%s holds %d volumes; pod %d stays Pending with the scheduler's reason", full.name, limit, limit+1)
}

// allocatable is the volume count a node's CSINode allows for the driver.
func allocatable(t *testing.T, node string) int32 {
	t.Helper()
	c, err := env.client.StorageV1().CSINodes().Get(t.Context(), node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range c.Spec.Drivers {
		if d.Name == env.driverName && d.Allocatable != nil && d.Allocatable.Count != nil {
			return *d.Allocatable.Count
		}
	}
	t.Fatalf("%s's CSINode has no allocatable count for %s", node, env.driverName)
	return 0
}
