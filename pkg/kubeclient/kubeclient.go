// Package kubeclient builds the Kubernetes API client of a Diskplane pod
// from its service account, for the parts of the node plugin that read or
// change Kubernetes objects (its Node's identity and startup taint, the
// VolumeAttachments its preStop hook waits for, its CSIDriver's token
// settings).
package kubeclient

import (
	"fmt"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// InCluster builds a client from the pod's service account token and the
// API server's address in the pod's environment.
func InCluster() (kubernetes.Interface, error) {
	cfg, err := rest.InClusterConfig()
	if err != nil {
		return nil, fmt.Errorf("no Kubernetes client: %w", err)
	}
	return fromConfig(cfg)
}

// New builds a client from the kubeconfig file at path, for a plugin run
// outside a pod (a host process of the local cluster, the node VM), or as
// InCluster does when path is empty.
func New(path string) (kubernetes.Interface, error) {
	if path == "" {
		return InCluster()
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		return nil, fmt.Errorf("no Kubernetes client from kubeconfig %s: %w", path, err)
	}
	return fromConfig(cfg)
}

func fromConfig(cfg *rest.Config) (kubernetes.Interface, error) {
	// Protobuf is cheaper for the API server than JSON; every object these
	// clients touch (Nodes, CSINodes, VolumeAttachments, CSIDrivers)
	// speaks it.
	cfg.ContentType = "application/vnd.kubernetes.protobuf"
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("build a Kubernetes client: %w", err)
	}
	return client, nil
}
