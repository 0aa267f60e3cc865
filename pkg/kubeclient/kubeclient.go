// Package kubeclient builds the Kubernetes API client of a Diskplane pod
// from its service account, for the parts of the node plugin that read or
// change Kubernetes objects (its Node's identity and startup taint, the
// VolumeAttachments its preStop hook waits for).
package kubeclient

import (
	"fmt"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// InCluster builds a client from the pod's service account token and the
// API server's address in the pod's environment.
func InCluster() (kubernetes.Interface, error) {
	cfg, err := rest.InClusterConfig()
	if err != nil {
		return nil, fmt.Errorf("no Kubernetes client: %w", err)
	}
	// Protobuf is cheaper for the API server than JSON; every object these
	// clients touch (Nodes, CSINodes, VolumeAttachments) speaks it.
	cfg.ContentType = "application/vnd.kubernetes.protobuf"
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("build a Kubernetes client: %w", err)
	}
	return client, nil
}
