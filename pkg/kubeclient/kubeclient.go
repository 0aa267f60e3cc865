// Package kubeclient builds the Kubernetes API client of a Diskplane pod
// from its service account, for the parts of the node plugin that read or
// change Kubernetes objects (its Node's identity and startup taint, the
// VolumeAttachments its preStop hook waits for, its CSIDriver's token
// settings) and for the controller's snapshot intents (package
// snapshotintent).
package kubeclient

import (
	"fmt"
	"net"
	"os"
	"path/filepath"

	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// InCluster builds a client from the pod's service account token and the
// API server's address in the pod's environment.
func InCluster() (kubernetes.Interface, error) { return New("") }

// serviceAccountDir is where the kubelet mounts a pod's service account,
// below the container's root.
var serviceAccountDir = filepath.Join("var", "run", "secrets", "kubernetes.io", "serviceaccount")

// SandboxEnv names the directory of a Windows HostProcess container's
// files and volume mounts, which containerd sets.
const SandboxEnv = "CONTAINER_SANDBOX_MOUNT_POINT"

// inClusterConfig is client-go's in-cluster configuration, which reads the
// service account at its absolute path, or, in a Windows HostProcess
// container where nothing is there, below the container's sandbox
// (SandboxEnv): containerd before 1.7 mounts it only there, and client-go
// does not look.
func inClusterConfig() (*rest.Config, error) {
	sandbox := os.Getenv(SandboxEnv)
	if sandbox == "" {
		return rest.InClusterConfig()
	}
	if _, err := os.Stat(filepath.Join(string(filepath.Separator), serviceAccountDir, "token")); err == nil {
		return rest.InClusterConfig()
	}
	host, port := os.Getenv("KUBERNETES_SERVICE_HOST"), os.Getenv("KUBERNETES_SERVICE_PORT")
	if host == "" || port == "" {
		return nil, rest.ErrNotInCluster
	}
	dir := filepath.Join(sandbox, serviceAccountDir)
	token := filepath.Join(dir, "token")
	if _, err := os.Stat(token); err != nil {
		return nil, fmt.Errorf("no service account token at the usual path or in the HostProcess sandbox: %w", err)
	}
	return &rest.Config{
		Host:            "https://" + net.JoinHostPort(host, port),
		TLSClientConfig: rest.TLSClientConfig{CAFile: filepath.Join(dir, "ca.crt")},
		BearerTokenFile: token,
	}, nil
}

// New builds a client from the kubeconfig file at path, for a plugin run
// outside a pod (a host process of the local cluster, the node VM), or as
// InCluster does when path is empty.
func New(path string) (kubernetes.Interface, error) {
	cfg, err := config(path)
	if err != nil {
		return nil, err
	}
	return fromConfig(cfg)
}

// NewDynamic builds a dynamic client as New builds a typed one, for the
// custom resources the controller touches (VolumeSnapshotContents), which
// no typed client of client-go knows.
func NewDynamic(path string) (dynamic.Interface, error) {
	cfg, err := config(path)
	if err != nil {
		return nil, err
	}
	// Every CreateSnapshot reads its VolumeSnapshotContent (and patches it
	// the first time), and the snapshotter asks again until the snapshot is
	// ready: client-go's default of 5 requests a second would queue a
	// burst of snapshots behind the client's own limiter. The API server's
	// priority and fairness still bounds this client.
	cfg.QPS, cfg.Burst = 50, 100
	client, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("build a Kubernetes client: %w", err)
	}
	return client, nil
}

// config is the kubeconfig file's configuration at path, or the pod's
// service account's when path is empty.
func config(path string) (*rest.Config, error) {
	if path == "" {
		cfg, err := inClusterConfig()
		if err != nil {
			return nil, fmt.Errorf("no Kubernetes client: %w", err)
		}
		return cfg, nil
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		return nil, fmt.Errorf("no Kubernetes client from kubeconfig %s: %w", path, err)
	}
	return cfg, nil
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
