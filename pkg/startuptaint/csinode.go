package startuptaint

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// RegisteredInCSINode is the default ReadyFunc: it reports ready once the
// kubelet has listed driverName in the node's CSINode object, which the
// kubelet does only after registration succeeded and NodeGetInfo answered.
// It needs no help from the plugin, so it works the same when
// node-driver-registrar registers the plugin.
func RegisteredInCSINode(client kubernetes.Interface, nodeName, driverName string) ReadyFunc {
	return func(ctx context.Context) (bool, error) {
		csiNode, err := client.StorageV1().CSINodes().Get(ctx, nodeName, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		if err != nil {
			return false, fmt.Errorf("get CSINode %s: %w", nodeName, err)
		}
		for _, d := range csiNode.Spec.Drivers {
			if d.Name == driverName {
				return true, nil
			}
		}
		return false, nil
	}
}
