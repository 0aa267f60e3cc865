//go:build e2e_multinode

package multinode

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/diskplane/diskplane/tests/e2e/poll"
)

// controllerSelector selects Diskplane's controller pods.
const controllerSelector = "app.kubernetes.io/name=diskplane,app.kubernetes.io/component=controller"

// controllers is what the controller's replicas hold: its pods that run
// (not being deleted), and for each of its Leases (one per sidecar, one for
// the node witness) the pod that holds it, "" when no running pod does.
type controllers struct {
	pods    map[string]corev1.Pod
	holders map[string]string
}

// readControllers reads the controller's pods and Leases. A sidecar's
// holder identity is its pod's name; the node witness's is the pod's name
// and a suffix.
func readControllers(ctx context.Context) (controllers, error) {
	c := controllers{pods: map[string]corev1.Pod{}, holders: map[string]string{}}
	pods, err := env.client.CoreV1().Pods("").List(ctx, metav1.ListOptions{LabelSelector: controllerSelector})
	if err != nil {
		return c, err
	}
	if len(pods.Items) == 0 {
		return c, fmt.Errorf("no controller pod")
	}
	ns := pods.Items[0].Namespace
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil {
			c.pods[p.Name] = p
		}
	}
	leases, err := env.client.CoordinationV1().Leases(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return c, err
	}
	sidecars := strings.ReplaceAll(env.driverName, ".", "-")
	for _, l := range leases.Items {
		if !strings.Contains(l.Name, sidecars) && l.Name != env.driverName+"-node-witness" {
			continue
		}
		holder := ""
		if l.Spec.HolderIdentity != nil {
			for name := range c.pods {
				if id := *l.Spec.HolderIdentity; id == name || strings.HasPrefix(id, name+"-") {
					holder = name
				}
			}
		}
		c.holders[l.Name] = holder
	}
	if _, ok := c.holders[env.driverName+"-node-witness"]; !ok {
		return c, fmt.Errorf("no Lease %s-node-witness among %v: is the node witness on?", env.driverName, slices.Sorted(maps.Keys(c.holders)))
	}
	return c, nil
}

// leader is the one pod holding every Lease, "" when they are split.
func (c controllers) leader() string {
	leader := ""
	for _, h := range c.holders {
		if h == "" || (leader != "" && h != leader) {
			return ""
		}
		leader = h
	}
	return leader
}

// minority is, when the Leases are split, the pod holding the fewest (the
// first by name on a tie, so that a split evenly is undone too); "" when
// one pod holds them all. Every Lease has a running holder.
func (c controllers) minority() string {
	count := map[string]int{}
	for _, h := range c.holders {
		count[h]++
	}
	if len(count) < 2 {
		return ""
	}
	least := ""
	for _, p := range slices.Sorted(maps.Keys(count)) {
		if least == "" || count[p] < count[least] {
			least = p
		}
	}
	return least
}

// ready is how many controller pods are Ready.
func (c controllers) ready() int {
	n := 0
	for _, p := range c.pods {
		if poll.PodReady(&p) {
			n++
		}
	}
	return n
}

// leadersOnOneWorker arranges that one controller replica leads every
// sidecar and the node witness, on a worker of a zone with two workers,
// with the other replica Ready elsewhere; it returns that zone, the
// leader's worker and the other worker of its zone. Replicas are deleted
// (and replaced by the Deployment) until it is so: the one holding fewer
// Leases, or a leader alone in its zone.
func leadersOnOneWorker(t *testing.T) (zone string, leaderNode, other worker) {
	t.Helper()
	var last string
	err := poll.Until(t.Context(), 5*time.Minute, func(ctx context.Context) (bool, string, error) {
		c, err := readControllers(ctx)
		if err != nil {
			return false, err.Error(), nil
		}
		state := fmt.Sprintf("leases %v, %d of %d replicas Ready", c.holders, c.ready(), len(c.pods))
		if c.ready() < 2 {
			return false, state, nil
		}
		for l, h := range c.holders {
			if h == "" {
				// Being taken over: its holder is gone or going.
				return false, "no running replica holds " + l + "; " + state, nil
			}
		}
		victim := ""
		if leader := c.leader(); leader != "" {
			w := workerNamed(t, c.pods[leader].Spec.NodeName)
			for _, o := range env.workers {
				if o.zone == w.zone && o.name != w.name {
					zone, leaderNode, other = w.zone, w, o
					t.Logf("controller pod %s on %s leads every sidecar and the node witness (%s)", leader, w.name, state)
					return true, "", nil
				}
			}
			victim = leader // alone in its zone: hand the Leases on
		} else {
			victim = c.minority()
		}
		if victim == "" || victim == last {
			return false, state, nil
		}
		t.Logf("deleting controller pod %s so that one replica leads on a worker with a zone partner (%s)", victim, state)
		if err := env.client.CoreV1().Pods(c.pods[victim].Namespace).Delete(ctx, victim, metav1.DeleteOptions{}); err != nil {
			return false, "", err
		}
		last = victim
		return false, state, nil
	})
	if err != nil {
		t.Fatalf("one controller replica leading everything: %v", err)
	}
	return zone, leaderNode, other
}

// waitControllersElsewhere waits until two controller replicas are Ready,
// none on the lost node, and every Lease is held by one of them.
func waitControllersElsewhere(t *testing.T, lost string) {
	t.Helper()
	err := poll.Until(t.Context(), podTimeout, func(ctx context.Context) (bool, string, error) {
		c, err := readControllers(ctx)
		if err != nil {
			return false, err.Error(), nil
		}
		for _, p := range c.pods {
			if p.Spec.NodeName == lost {
				return false, "controller pod " + p.Name + " still on " + lost, nil
			}
		}
		for l, h := range c.holders {
			if h == "" {
				return false, "no running replica holds " + l, nil
			}
		}
		return c.ready() >= 2, fmt.Sprintf("%d controller replicas Ready", c.ready()), nil
	})
	if err != nil {
		t.Fatalf("the controller after the loss of %s: %v", lost, err)
	}
}

// witnessMetrics is the node witness's leader's /metrics, through the API
// server's proxy to its pod.
func witnessMetrics(ctx context.Context) (string, error) {
	c, err := readControllers(ctx)
	if err != nil {
		return "", err
	}
	leader := c.holders[env.driverName+"-node-witness"]
	if leader == "" {
		return "", fmt.Errorf("no running replica holds the node witness's Lease")
	}
	return kubectl(ctx, "get", "--raw", fmt.Sprintf("/api/v1/namespaces/%s/pods/%s:%d/proxy/metrics", c.pods[leader].Namespace, leader, controllerHTTPPort))
}

// controllerHTTPPort is the chart's controller.httpPort (/metrics).
const controllerHTTPPort = 3301
