//go:build e2e_install

// Package install tests Diskplane installed into a cluster the way a user
// installs it, with Helm (charts/diskplane) or kustomize: what the e2e suite
// of tests/e2e cannot see from the driver's behaviour alone. The node plugin
// removes its startup taint and the admission policy limits it; `helm
// upgrade` with other values rolls the controller and the node plugin while
// a pod keeps using its mounted volume; uninstalling leaves no Diskplane
// object behind. hack/e2e/incluster.sh (make e2e-helm, make e2e-kustomize)
// runs TestInstalled after the install, the e2e suite, TestUpgrade (Helm
// only), TestLeaderFailover, TestDrain and TestUninstall last, each on its own with
// -run: they change the installation, so their order matters. The build tag keeps them out of
// make test and make e2e.
package install

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/diskplane/diskplane/tests/e2e/kubetest"
	"github.com/diskplane/diskplane/tests/e2e/poll"
)

// The chart's fixed names and labels (the kustomize base has the same).
const (
	controllerName = "diskplane-controller"
	nodeName       = "diskplane-node"
	// appSelector selects every object the chart labels, whoever installed it.
	appSelector = "app.kubernetes.io/name=diskplane"
	// pluginContainer is the plugin's container in the controller and node pods.
	pluginContainer = "diskplane"
)

// installation is the Diskplane under test and how to reach the cluster.
type installation struct {
	repo       string
	kubeconfig string
	kubectl    string
	helm       string
	// kustomizeDir is the overlay a kustomize install applied.
	kustomizeDir string
	driverName   string
	config       *rest.Config
	client       kubernetes.Interface
	dynamic      dynamic.Interface
	// node is the cluster's single node.
	node string
	// namespace, release and method (Helm or kustomize) are read from the
	// controller Deployment's labels.
	namespace string
	release   string
	method    string
}

// The values of app.kubernetes.io/managed-by.
const (
	byHelm      = "Helm"
	byKustomize = "kustomize"
)

// env is set up once by TestMain.
var env *installation

// TestMain finds the installation from the cluster: the controller
// Deployment's labels say in which namespace, under which release name and
// by which tool Diskplane was installed.
func TestMain(m *testing.M) {
	var err error
	if env, err = findInstallation(context.Background()); err != nil {
		fmt.Fprintf(os.Stderr, "install: %v\n", err)
		os.Exit(1)
	}
	fmt.Fprintf(os.Stderr, "install: Diskplane release %q in namespace %s, installed with %s\n", env.release, env.namespace, env.method)
	os.Exit(m.Run())
}

func findInstallation(ctx context.Context) (*installation, error) {
	wd, err := os.Getwd()
	if err != nil {
		return nil, err
	}
	in := &installation{repo: filepath.Clean(filepath.Join(wd, "..", "..", ".."))}
	clusterDir := kubetest.EnvOr("LOCAL_CLUSTER_DIR", filepath.Join(in.repo, "_output", "local-cluster"))
	in.kubeconfig = kubetest.EnvOr("KUBECONFIG", filepath.Join(clusterDir, "run", "pki", "admin.kubeconfig"))
	in.kubectl = kubetest.EnvOr("KUBECTL", filepath.Join(clusterDir, "bin", "kubectl"))
	in.helm = kubetest.EnvOr("HELM", filepath.Join(in.repo, "_output", "tools", "helm"))
	in.kustomizeDir = kubetest.EnvOr("E2E_KUSTOMIZE_DIR", filepath.Join(in.repo, "hack", "e2e", "kustomize"))
	in.driverName = kubetest.EnvOr("DRIVER_NAME", "ebs.csi.diskplane.io")
	if in.config, err = clientcmd.BuildConfigFromFlags("", in.kubeconfig); err != nil {
		return nil, fmt.Errorf("kubeconfig %s: %w", in.kubeconfig, err)
	}
	in.config.QPS, in.config.Burst = 50, 100
	// TestUninstall lists every kind the API server serves, deprecated ones
	// (v1 Endpoints, ComponentStatus) included: no warnings for that.
	in.config.WarningHandler = rest.NoWarnings{}
	if in.client, err = kubernetes.NewForConfig(in.config); err != nil {
		return nil, err
	}
	if in.dynamic, err = dynamic.NewForConfig(in.config); err != nil {
		return nil, err
	}
	nodes, err := in.client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("the cluster of %s does not answer: %w", in.kubeconfig, err)
	}
	if len(nodes.Items) != 1 {
		return nil, fmt.Errorf("the tests expect a single-node cluster, this one has %d nodes", len(nodes.Items))
	}
	in.node = nodes.Items[0].Name
	deps, err := in.client.AppsV1().Deployments("").List(ctx, metav1.ListOptions{
		LabelSelector: appSelector + ",app.kubernetes.io/component=controller"})
	if err != nil {
		return nil, err
	}
	if len(deps.Items) != 1 {
		return nil, fmt.Errorf("found %d Diskplane controller Deployments, want 1: install Diskplane first (hack/e2e/incluster.sh)", len(deps.Items))
	}
	d := deps.Items[0]
	in.namespace, in.release = d.Namespace, d.Labels["app.kubernetes.io/instance"]
	in.method = d.Labels["app.kubernetes.io/managed-by"]
	if in.method != byHelm && in.method != byKustomize {
		return nil, fmt.Errorf("deployment %s/%s is managed by %q, want %s or %s", d.Namespace, d.Name, in.method, byHelm, byKustomize)
	}
	return in, nil
}

func kubectl(ctx context.Context, args ...string) (string, error) {
	return kubetest.Run(ctx, env.kubectl, append([]string{"--kubeconfig", env.kubeconfig}, args...)...)
}

func helm(ctx context.Context, args ...string) (string, error) {
	return kubetest.Run(ctx, env.helm, append([]string{"--kubeconfig", env.kubeconfig}, args...)...)
}

// waitFor polls like poll, fails the test on timeout and logs how long it
// took.
func waitFor(t *testing.T, what string, timeout time.Duration, check func(context.Context) (bool, string, error)) time.Duration {
	t.Helper()
	start := time.Now()
	if err := poll.Until(t.Context(), timeout, check); err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
	took := time.Since(start).Round(100 * time.Millisecond)
	t.Logf("%s after %s", what, took)
	return took
}

// rolledOut reports whether the controller Deployment and the node
// DaemonSet run their current template everywhere, all Ready; state says
// what is still missing.
func rolledOut(ctx context.Context) (bool, string, error) {
	d, err := env.client.AppsV1().Deployments(env.namespace).Get(ctx, controllerName, metav1.GetOptions{})
	if err != nil {
		return false, "", err
	}
	if s := deploymentPending(d); s != "" {
		return false, s, nil
	}
	ds, err := env.client.AppsV1().DaemonSets(env.namespace).Get(ctx, nodeName, metav1.GetOptions{})
	if err != nil {
		return false, "", err
	}
	if s := daemonSetPending(ds); s != "" {
		return false, s, nil
	}
	return true, "", nil
}

func deploymentPending(d *appsv1.Deployment) string {
	want := int32(1)
	if d.Spec.Replicas != nil {
		want = *d.Spec.Replicas
	}
	st := d.Status
	if st.ObservedGeneration < d.Generation || st.UpdatedReplicas != want || st.ReadyReplicas != want ||
		st.AvailableReplicas != want || st.Replicas != want {
		return fmt.Sprintf("deployment %s: generation %d observed %d, replicas %d updated %d ready %d available %d, want %d",
			d.Name, d.Generation, st.ObservedGeneration, st.Replicas, st.UpdatedReplicas, st.ReadyReplicas, st.AvailableReplicas, want)
	}
	return ""
}

func daemonSetPending(ds *appsv1.DaemonSet) string {
	st := ds.Status
	if st.ObservedGeneration < ds.Generation || st.DesiredNumberScheduled == 0 ||
		st.UpdatedNumberScheduled != st.DesiredNumberScheduled || st.NumberReady != st.DesiredNumberScheduled ||
		st.NumberAvailable != st.DesiredNumberScheduled {
		return fmt.Sprintf("daemonset %s: generation %d observed %d, desired %d updated %d ready %d available %d",
			ds.Name, ds.Generation, st.ObservedGeneration, st.DesiredNumberScheduled, st.UpdatedNumberScheduled,
			st.NumberReady, st.NumberAvailable)
	}
	return ""
}

// driverRegistered reports whether the node's CSINode lists the driver,
// i.e. whether the kubelet has registered the node plugin.
func driverRegistered(ctx context.Context) (bool, error) {
	n, err := env.client.StorageV1().CSINodes().Get(ctx, env.node, metav1.GetOptions{})
	if err != nil {
		return false, err
	}
	for _, d := range n.Spec.Drivers {
		if d.Name == env.driverName {
			return true, nil
		}
	}
	return false, nil
}
