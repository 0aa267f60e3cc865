package startuptaint

import (
	"context"
	"errors"
	"testing"

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

// With node-driver-registrar, Run waits for the kubelet's CSINode entry.
func TestRunWithCSINodeReadiness(t *testing.T) {
	client := fake.NewClientset(node(testNode, startupTaint), csiNode(testNode))
	cfg := fastConfig(client)
	registered := RegisteredInCSINode(client, testNode, testDriver)
	var asked int
	cfg.Ready = func(ctx context.Context) (bool, error) {
		asked++
		if asked == 3 {
			// The kubelet registers the driver.
			if _, err := client.StorageV1().CSINodes().Update(ctx, csiNode(testNode, testDriver), metav1.UpdateOptions{}); err != nil {
				return false, err
			}
		}
		return registered(ctx)
	}
	if err := Run(context.Background(), cfg); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if asked != 3 {
		t.Errorf("readiness asked %d times, want 3", asked)
	}
	if got := taintsOf(t, client, testNode); len(got) != 0 {
		t.Errorf("taints = %v", got)
	}
}
