package podevents

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

// TestWarn: a warning reaches the API server as an event on the pod, from
// the node plugin on its node; a repeat is folded into a count.
func TestWarn(t *testing.T) {
	client := fake.NewClientset()
	r := New(client, "node-1")
	defer r.Shutdown()
	pod := Pod{Namespace: "shop", Name: "db-0", UID: "8d2c"}
	r.Warn(pod, "KeyAccessRevoked", "access to the key of volume vol-1 was revoked")
	r.Warn(pod, "KeyAccessRevoked", "access to the key of volume vol-1 was revoked")
	deadline := time.Now().Add(10 * time.Second)
	for {
		events, err := client.CoreV1().Events("shop").List(t.Context(), metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(events.Items) == 1 && events.Items[0].Count == 2 {
			e := events.Items[0]
			if e.InvolvedObject.Kind != "Pod" || e.InvolvedObject.Name != "db-0" || string(e.InvolvedObject.UID) != "8d2c" ||
				e.Type != corev1.EventTypeWarning || e.Reason != "KeyAccessRevoked" || e.Source.Component != Component || e.Source.Host != "node-1" {
				t.Fatalf("event %+v", e)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("events %+v", events.Items)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
