package startuptaint

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

func csiNode(name string, drivers ...string) *storagev1.CSINode {
	n := &storagev1.CSINode{ObjectMeta: metav1.ObjectMeta{Name: name}}
	for _, d := range drivers {
		n.Spec.Drivers = append(n.Spec.Drivers, storagev1.CSINodeDriver{Name: d, NodeID: "i-0123456789abcdef0"})
	}
	return n
}

func TestRegisteredInCSINode(t *testing.T) {
	tests := []struct {
		name      string
		objects   []runtime.Object
		getErr    error
		wantReady bool
		wantErr   bool
	}{
		{name: "driver listed", objects: []runtime.Object{csiNode(testNode, "other.csi", testDriver)}, wantReady: true},
		{name: "other drivers only", objects: []runtime.Object{csiNode(testNode, "other.csi")}},
		{name: "listed on another node only", objects: []runtime.Object{csiNode("node-b", testDriver), csiNode(testNode)}},
		{name: "no CSINode yet", objects: nil},
		{name: "API error", getErr: apierrors.NewServiceUnavailable("down"), wantErr: true},
		{name: "forbidden", getErr: apierrors.NewForbidden(schema.GroupResource{Group: "storage.k8s.io", Resource: "csinodes"}, testNode, errors.New("no")), wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			client := fake.NewClientset(tc.objects...)
			if tc.getErr != nil {
				client.PrependReactor("get", "csinodes", func(k8stesting.Action) (bool, runtime.Object, error) {
					return true, nil, tc.getErr
				})
			}
			ready, err := RegisteredInCSINode(client, testNode, testDriver)(context.Background())
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, wantErr %v", err, tc.wantErr)
			}
			if ready != tc.wantReady {
				t.Fatalf("ready = %v, want %v", ready, tc.wantReady)
			}
		})
	}
}

// Without a Ready func, Run waits for the kubelet's CSINode entry.
func TestRunWaitsForCSINodeByDefault(t *testing.T) {
	client := fake.NewClientset(node(testNode, startupTaint), csiNode(testNode))
	cfg := fastConfig(client)
	cfg.Ready = nil
	var gets atomic.Int32
	client.PrependReactor("get", "csinodes", func(k8stesting.Action) (bool, runtime.Object, error) {
		switch gets.Add(1) {
		case 2:
			// Still no taint removed: the kubelet has not registered us.
			// (The tracker, not the client: a reactor holds the client's lock.)
			n, err := client.Tracker().Get(corev1.SchemeGroupVersion.WithResource("nodes"), "", testNode)
			if err != nil {
				return true, nil, err
			}
			if got := n.(*corev1.Node).Spec.Taints; len(got) != 1 {
				t.Errorf("taint removed before registration: %v", got)
			}
		case 3:
			// The kubelet registers the driver.
			if err := client.Tracker().Update(storagev1.SchemeGroupVersion.WithResource("csinodes"), csiNode(testNode, testDriver), ""); err != nil {
				return true, nil, err
			}
		}
		return false, nil, nil
	})
	if err := Run(context.Background(), cfg); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if gets.Load() != 3 {
		t.Errorf("CSINode read %d times, want 3", gets.Load())
	}
	if got := taintsOf(t, client, testNode); len(got) != 0 {
		t.Errorf("taints = %v", got)
	}
}
