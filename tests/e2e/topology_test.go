//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
)

// TestTopology checks where volumes are created. With WaitForFirstConsumer
// (examples/topology, its zone set to the node's) nothing is created until a
// pod uses the claim, and then the volume is created in the zone of the
// node the pod was scheduled to. With Immediate binding and allowedTopologies
// naming another zone of the region, one with no node at all, the volume is
// created there: the driver follows the requested topology, not its own
// zone.
func TestTopology(t *testing.T) {
	t.Parallel()
	t.Run("WaitForFirstConsumer", func(t *testing.T) {
		t.Parallel()
		sc := newScenario(t)
		m := sc.example("topology")
		class := m.get(t, "StorageClass")
		setZones(t, class.Object, env.zone)
		sc.create(m.without("Pod")...)

		sc.waitFor("the claim to wait for its first consumer", bindTimeout, func(ctx context.Context) (bool, string, error) {
			return claimEvent(ctx, sc.ns, "diskplane-zonal-claim", "WaitForFirstConsumer")
		})
		if c := sc.claim("diskplane-zonal-claim"); c.Status.Phase != corev1.ClaimPending {
			t.Fatalf("claim is %s before any pod uses it, want Pending", c.Status.Phase)
		}
		vols, err := env.emulator.volumesTagged(t.Context(), "kubernetes.io/created-for/pvc/namespace", sc.ns)
		if err != nil || len(vols) != 0 {
			t.Fatalf("EC2 volumes for the claim before any pod uses it: %d (%v), want none", len(vols), err)
		}

		sc.create(m.get(t, "Pod"))
		pod := sc.podReady("zonal-app")
		_, pv := sc.claimBound("diskplane-zonal-claim")
		if pod.Spec.NodeName != env.node {
			t.Fatalf("pod runs on %q, want the node %s", pod.Spec.NodeName, env.node)
		}
		checkVolumeZone(t, pv, env.zone)
		checkAttachedVolume(t, pv, 4)
	})
	t.Run("allowedTopologies", func(t *testing.T) {
		t.Parallel()
		other := otherZone(env.zone)
		sc := newScenario(t)
		m := sc.example("topology")
		class := m.get(t, "StorageClass")
		setZones(t, class.Object, other)
		set(t, class, "Immediate", "volumeBindingMode")
		sc.create(m.without("Pod")...)
		_, pv := sc.claimBound("diskplane-zonal-claim")
		checkVolumeZone(t, pv, other)
	})
}

// setZones makes a class's allowedTopologies the one zone.
func setZones(t *testing.T, class map[string]any, zone string) {
	t.Helper()
	class["allowedTopologies"] = []any{map[string]any{"matchLabelExpressions": []any{
		map[string]any{"key": "topology.kubernetes.io/zone", "values": []any{zone}},
	}}}
}

// otherZone returns a zone of the node's region other than its own: the
// emulator plays the region's zones a, b and c.
func otherZone(zone string) string {
	if zone[len(zone)-1] == 'c' {
		return zone[:len(zone)-1] + "b"
	}
	return zone[:len(zone)-1] + "c"
}

// checkVolumeZone checks that the PV may only be used in the zone, and that
// its EC2 volume is in it.
func checkVolumeZone(t *testing.T, pv *corev1.PersistentVolume, zone string) {
	t.Helper()
	var zones []string
	if pv.Spec.NodeAffinity != nil && pv.Spec.NodeAffinity.Required != nil {
		for _, term := range pv.Spec.NodeAffinity.Required.NodeSelectorTerms {
			for _, e := range term.MatchExpressions {
				if e.Key == "topology.kubernetes.io/zone" {
					zones = append(zones, e.Values...)
				}
			}
		}
	}
	if !slices.Equal(zones, []string{zone}) {
		t.Errorf("PV %s is accessible from the zones %v, want [%s]", pv.Name, zones, zone)
	}
	if vol := env.emulator.volume(t, pv.Spec.CSI.VolumeHandle); vol.Zone != zone {
		t.Errorf("EC2 volume %s is in %s, want %s", vol.ID, vol.Zone, zone)
	}
}

// claimEvent reports whether the claim has an event with the reason.
func claimEvent(ctx context.Context, ns, claim, reason string) (bool, string, error) {
	sel := fields.Set{"involvedObject.kind": "PersistentVolumeClaim", "involvedObject.name": claim}.AsSelector().String()
	events, err := env.client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: sel})
	if err != nil {
		return false, "", err
	}
	var seen []string
	for _, e := range events.Items {
		if e.Reason == reason {
			return true, "", nil
		}
		seen = append(seen, e.Reason)
	}
	return false, fmt.Sprintf("events so far: %v", seen), nil
}
