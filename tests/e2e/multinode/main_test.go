//go:build e2e_multinode

// Package multinode tests Diskplane where volumes meet more than one node:
// pods that move between nodes, nodes that die with volumes attached,
// volumes in two zones, io2 volumes shared by two nodes, attachment limits
// and drains. It runs in the multi-node local cluster (hack/local-cluster
// with WORKERS=N: every worker its own EC2 instance of the emulator, in its
// own namespaces, seeing only its own volumes) with Diskplane installed by
// Helm; hack/e2e/multinode.sh (make e2e-multinode) brings that up and runs
// them. The build tag keeps them out of make test and the other suites.
package multinode

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/diskplane/diskplane/pkg/emulator/admin"
	"github.com/diskplane/diskplane/tests/e2e/kubetest"
)

// worker is one worker node of the cluster and the instance it plays, as
// hack/local-cluster/worker.sh records it in run/workers.tsv.
type worker struct {
	index      string // worker.sh's number for it
	name       string // the Node's name
	ip         string
	zone       string
	instanceID string
	typ        string
	linkDir    string // where its volumes' by-id links are, as the host sees it
}

// cluster is the cluster under test and how to reach it.
type cluster struct {
	repo         string
	kubeconfig   string
	kubectl      string
	workerTool   string // hack/local-cluster/worker.sh
	driverName   string
	storageClass string
	client       kubernetes.Interface
	emulator     *admin.Client
	workers      []worker
}

// env is set up once by TestMain.
var env *cluster

// TestMain finds the cluster, its workers and the emulator, and checks that
// Diskplane serves on every worker before any test starts.
func TestMain(m *testing.M) {
	var err error
	if env, err = findCluster(context.Background()); err != nil {
		fmt.Fprintf(os.Stderr, "multinode: %v\n", err)
		os.Exit(1)
	}
	for _, w := range env.workers {
		fmt.Fprintf(os.Stderr, "multinode: %s %s %s %s (%s)\n", w.name, w.ip, w.zone, w.instanceID, w.typ)
	}
	os.Exit(m.Run())
}

func findCluster(ctx context.Context) (*cluster, error) {
	wd, err := os.Getwd()
	if err != nil {
		return nil, err
	}
	c := &cluster{repo: filepath.Clean(filepath.Join(wd, "..", "..", ".."))}
	clusterDir := kubetest.EnvOr("LOCAL_CLUSTER_DIR", filepath.Join(c.repo, "_output", "local-cluster"))
	c.kubeconfig = kubetest.EnvOr("KUBECONFIG", filepath.Join(clusterDir, "run", "pki", "admin.kubeconfig"))
	c.kubectl = kubetest.EnvOr("KUBECTL", filepath.Join(clusterDir, "bin", "kubectl"))
	c.workerTool = filepath.Join(c.repo, "hack", "local-cluster", "worker.sh")
	c.driverName = kubetest.EnvOr("DRIVER_NAME", "ebs.csi.diskplane.io")
	c.storageClass = kubetest.EnvOr("E2E_STORAGE_CLASS", "diskplane-gp3")
	c.emulator = &admin.Client{URL: kubetest.EnvOr("E2E_EMULATOR_ADMIN", "http://127.0.0.1:8702")}
	config, err := clientcmd.BuildConfigFromFlags("", c.kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("kubeconfig %s: %w", c.kubeconfig, err)
	}
	config.QPS, config.Burst = 50, 100
	if c.client, err = kubernetes.NewForConfig(config); err != nil {
		return nil, err
	}
	if c.workers, err = readWorkers(filepath.Join(clusterDir, "run", "workers.tsv"), kubetest.EnvOr("E2E_NODE_LINK_DIR", "/dev/diskplane-e2e-by-id")); err != nil {
		return nil, err
	}
	if len(c.workers) < 3 {
		return nil, fmt.Errorf("the scenarios need at least three workers, the cluster has %d (WORKERS=3 hack/local-cluster/up.sh)", len(c.workers))
	}
	for _, w := range c.workers {
		n, err := c.client.CoreV1().Nodes().Get(ctx, w.name, metav1.GetOptions{})
		if err != nil {
			return nil, fmt.Errorf("worker %s: %w", w.name, err)
		}
		if !nodeReady(n) {
			return nil, fmt.Errorf("worker %s is not Ready", w.name)
		}
		csiNode, err := c.client.StorageV1().CSINodes().Get(ctx, w.name, metav1.GetOptions{})
		if err != nil || !slices.ContainsFunc(csiNode.Spec.Drivers, func(d storagev1.CSINodeDriver) bool { return d.Name == c.driverName }) {
			return nil, fmt.Errorf("worker %s has no %s node plugin registered (install Diskplane first: hack/e2e/multinode.sh install): %v", w.name, c.driverName, err)
		}
	}
	return c, nil
}

// readWorkers parses worker.sh's record: one tab-separated line per worker
// (the Node's name worker-K, its IP, zone, instance ID, instance type, its
// /dev as the host sees it, then columns these tests do not use); lines
// starting with # are comments. nodeLinks is the by-id directory the node
// plugins are given, inside each worker's /dev.
func readWorkers(path, nodeLinks string) ([]worker, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("no multi-node cluster: %w", err)
	}
	defer f.Close()
	var out []worker
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Split(line, "\t")
		index, ok := strings.CutPrefix(f[0], "worker-")
		if len(f) < 6 || !ok {
			return nil, fmt.Errorf("%s: unexpected line %q", path, line)
		}
		out = append(out, worker{index: index, name: f[0], ip: f[1], zone: f[2], instanceID: f[3], typ: f[4],
			linkDir: filepath.Join(f[5], strings.TrimPrefix(nodeLinks, "/dev/"))})
	}
	return out, sc.Err()
}

func kubectl(ctx context.Context, args ...string) (string, error) {
	return kubetest.Run(ctx, env.kubectl, append([]string{"--kubeconfig", env.kubeconfig}, args...)...)
}

// workerTool runs hack/local-cluster/worker.sh with a subcommand for one
// worker (kill, down, up, cut, uncut).
func workerTool(t *testing.T, command string, w worker) {
	t.Helper()
	start := time.Now()
	if _, err := kubetest.Run(t.Context(), env.workerTool, command, w.index); err != nil {
		t.Fatal(err)
	}
	t.Logf("worker.sh %s %s (%s) took %s", command, w.index, w.name, time.Since(start).Round(100*time.Millisecond))
}

func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
