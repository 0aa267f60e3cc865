package drain

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

const (
	testNode   = "node-a"
	testDriver = "ebs.csi.diskplane.io"
)

func node(change func(n *corev1.Node)) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: testNode}}
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Message: "kubelet is posting ready status"}}
	if change != nil {
		change(n)
	}
	return n
}

func cordoned(n *corev1.Node) { n.Spec.Unschedulable = true }

func attachment(name, attacher, nodeName string) *storagev1.VolumeAttachment {
	pv := "pv-" + name
	return &storagev1.VolumeAttachment{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: storagev1.VolumeAttachmentSpec{Attacher: attacher, NodeName: nodeName,
			Source: storagev1.VolumeAttachmentSource{PersistentVolumeName: &pv}},
	}
}

func TestReason(t *testing.T) {
	now := metav1.Now()
	taint := func(key string) func(n *corev1.Node) {
		return func(n *corev1.Node) { n.Spec.Taints = []corev1.Taint{{Key: key, Effect: corev1.TaintEffectNoSchedule}} }
	}
	tests := []struct {
		name string
		node *corev1.Node
		want string
	}{
		{"a node that stays", node(nil), ""},
		{"a node with an unrelated taint", node(taint("dedicated")), ""},
		{"cordoned (kubectl drain)", node(cordoned), "cordoned"},
		{"being deleted", node(func(n *corev1.Node) { n.DeletionTimestamp = &now }), "being deleted"},
		{"unschedulable taint", node(taint("node.kubernetes.io/unschedulable")), "node.kubernetes.io/unschedulable"},
		{"cluster autoscaler", node(taint("ToBeDeletedByClusterAutoscaler")), "ToBeDeletedByClusterAutoscaler"},
		{"Karpenter v1", node(taint("karpenter.sh/disrupted")), "karpenter.sh/disrupted"},
		{"Karpenter before v1", node(taint("karpenter.sh/disruption")), "karpenter.sh/disruption"},
		{"non-graceful shutdown", node(taint("node.kubernetes.io/out-of-service")), "out-of-service"},
		{"graceful shutdown", node(func(n *corev1.Node) {
			n.Status.Conditions[0].Status = corev1.ConditionFalse
			n.Status.Conditions[0].Message = "container runtime status check may not have completed yet, node is shutting down"
		}), "shutting the node down"},
		{"not ready for another reason", node(func(n *corev1.Node) {
			n.Status.Conditions[0].Status = corev1.ConditionFalse
			n.Status.Conditions[0].Message = "PLEG is not healthy"
		}), ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := Reason(tc.node)
			if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
				t.Errorf("Reason = %q, want %q", got, tc.want)
			}
		})
	}
}

// waitAsync runs Wait in the background and returns its result channel.
func waitAsync(ctx context.Context, client *fake.Clientset) <-chan error {
	done := make(chan error, 1)
	go func() {
		done <- Wait(ctx, Config{Client: client, NodeName: testNode, DriverName: testDriver, PollInterval: 5 * time.Millisecond})
	}()
	return done
}

// pending fails the test when Wait returned already.
func pending(t *testing.T, done <-chan error, what string) {
	t.Helper()
	select {
	case err := <-done:
		t.Fatalf("Wait returned (%v) %s", err, what)
	case <-time.After(50 * time.Millisecond):
	}
}

func finished(t *testing.T, done <-chan error) error {
	t.Helper()
	select {
	case err := <-done:
		return err
	case <-time.After(5 * time.Second):
		t.Fatal("Wait did not return")
		return nil
	}
}

func deleteVA(t *testing.T, client *fake.Clientset, name string) {
	t.Helper()
	if err := client.StorageV1().VolumeAttachments().Delete(context.Background(), name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
}

// TestWaitForTheNodesAttachments drains a node with two volumes of the
// driver attached (and others that do not count): Wait returns only once
// both VolumeAttachments are gone.
func TestWaitForTheNodesAttachments(t *testing.T) {
	client := fake.NewClientset(node(cordoned),
		attachment("va-1", testDriver, testNode), attachment("va-2", testDriver, testNode),
		attachment("va-other-node", testDriver, "node-b"), attachment("va-other-driver", "ebs.csi.aws.com", testNode))
	done := waitAsync(context.Background(), client)
	pending(t, done, "with two volumes attached")
	deleteVA(t, client, "va-1")
	pending(t, done, "with one volume attached")
	deleteVA(t, client, "va-2")
	if err := finished(t, done); err != nil {
		t.Fatalf("Wait = %v", err)
	}
}

func TestWaitReturnsAtOnce(t *testing.T) {
	tests := []struct {
		name    string
		objects []runtime.Object
	}{
		{"a node that stays, with volumes", []runtime.Object{node(nil), attachment("va-1", testDriver, testNode)}},
		{"a drained node without volumes", []runtime.Object{node(cordoned), attachment("va-other", "other.csi", testNode)}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if err := finished(t, waitAsync(context.Background(), fake.NewClientset(tc.objects...))); err != nil {
				t.Fatalf("Wait = %v", err)
			}
		})
	}
}

// TestWaitEndsWhenTheDrainIsCalledOff uncordons the node while Wait waits.
func TestWaitEndsWhenTheDrainIsCalledOff(t *testing.T) {
	client := fake.NewClientset(node(cordoned), attachment("va-1", testDriver, testNode))
	done := waitAsync(context.Background(), client)
	pending(t, done, "while the node is cordoned")
	if _, err := client.CoreV1().Nodes().Update(context.Background(), node(nil), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := finished(t, done); err != nil {
		t.Fatalf("Wait = %v", err)
	}
}

// TestWaitForADeletedNode: a Node object that is gone counts as going away.
func TestWaitForADeletedNode(t *testing.T) {
	client := fake.NewClientset(attachment("va-1", testDriver, testNode))
	done := waitAsync(context.Background(), client)
	pending(t, done, "with the Node gone and a volume attached")
	deleteVA(t, client, "va-1")
	if err := finished(t, done); err != nil {
		t.Fatalf("Wait = %v", err)
	}
}

// TestWaitIsBounded: the kubelet's grace period (here a context) ends the
// wait, and the error names what was still attached.
func TestWaitIsBounded(t *testing.T) {
	client := fake.NewClientset(node(cordoned), attachment("va-1", testDriver, testNode))
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	err := finished(t, waitAsync(ctx, client))
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "va-1 (pv-va-1)") {
		t.Fatalf("Wait = %v, want the deadline and what was still attached", err)
	}
}

func TestWaitFailures(t *testing.T) {
	t.Run("the API fails", func(t *testing.T) {
		client := fake.NewClientset(node(cordoned))
		client.PrependReactor("list", "volumeattachments", func(k8stesting.Action) (bool, runtime.Object, error) {
			return true, nil, apierrors.NewForbidden(storagev1.Resource("volumeattachments"), "", errors.New("RBAC"))
		})
		if err := finished(t, waitAsync(context.Background(), client)); err == nil || !strings.Contains(err.Error(), "forbidden") {
			t.Fatalf("Wait = %v, want the API's refusal", err)
		}
	})
	t.Run("no node name", func(t *testing.T) {
		if err := Wait(context.Background(), Config{Client: fake.NewClientset(), DriverName: testDriver}); err == nil {
			t.Fatal("Wait without a node name succeeded")
		}
	})
}
