//go:build e2e

// Package e2e holds Diskplane's end-to-end tests: they run against a real
// Kubernetes cluster with Diskplane and the EC2 emulator (make e2e brings up
// the local one of hack/local-cluster with hack/e2e/up.sh), apply the
// manifests of examples/ the way a user would, and check both what
// Kubernetes reports and what the emulated EC2 holds. The build tag keeps
// them out of `make test`, which has no cluster.
package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/diskplane/diskplane/pkg/emulator/admin"
)

// suite is what every test talks to: the cluster's API, kubectl for exec,
// the emulator's admin API, and where the repository's files are.
type suite struct {
	repo       string
	clusterDir string
	kubeconfig string
	kubectl    string
	driverName string
	// node is the cluster's node the tests' pods run on, and its zone and
	// EC2 instance (from its providerID).
	node       string
	zone       string
	instanceID string
	client     kubernetes.Interface
	dynamic    dynamic.Interface
	emulator   *emulator
	// driver is how Diskplane runs: host processes or in the cluster.
	driver driverRuntime
}

// env is set up once by TestMain.
var env *suite

// leakTimeout bounds how long TestMain waits, after the tests, for EC2
// volumes and snapshots they made to be deleted (deletion is asynchronous:
// PV reclaim, then the emulator's deleting state).
const leakTimeout = 3 * time.Minute

// TestMain connects to the cluster and the emulator, records which EC2
// volumes and snapshots exist before the tests, runs them, and then fails
// the run when any volume or snapshot made during it is still there: every
// test deletes what it made, so anything left is a leak (of the driver, or
// of a test).
func TestMain(m *testing.M) {
	var err error
	env, err = newSuite()
	if err != nil {
		fmt.Fprintf(os.Stderr, "e2e: %v\n", err)
		os.Exit(1)
	}
	ctx := context.Background()
	before, err := env.emulator.resourceIDs(ctx)
	if err != nil {
		fmt.Fprintf(os.Stderr, "e2e: the EC2 emulator at %s: %v (make e2e starts it)\n", env.emulator.client.URL, err)
		os.Exit(1)
	}
	code := m.Run()
	if leaked := env.waitForNoLeaks(ctx, before); len(leaked) > 0 {
		fmt.Fprintf(os.Stderr, "FAIL: EC2 resources made during the tests are still there after %s:\n  %s\n",
			leakTimeout, strings.Join(leaked, "\n  "))
		code = 1
	} else {
		fmt.Fprintf(os.Stderr, "e2e: no EC2 volume or snapshot left behind (%d were there before)\n", len(before))
	}
	os.Exit(code)
}

func newSuite() (*suite, error) {
	wd, err := os.Getwd()
	if err != nil {
		return nil, err
	}
	s := &suite{repo: filepath.Clean(filepath.Join(wd, "..", ".."))}
	s.clusterDir = envOr("LOCAL_CLUSTER_DIR", filepath.Join(s.repo, "_output", "local-cluster"))
	s.kubeconfig = envOr("KUBECONFIG", filepath.Join(s.clusterDir, "run", "pki", "admin.kubeconfig"))
	s.kubectl = envOr("KUBECTL", filepath.Join(s.clusterDir, "bin", "kubectl"))
	s.driverName = envOr("DRIVER_NAME", "ebs.csi.diskplane.io")
	s.emulator = &emulator{client: admin.Client{URL: envOr("E2E_EMULATOR_ADMIN", "http://127.0.0.1:8702")}}
	cfg, err := clientcmd.BuildConfigFromFlags("", s.kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("kubeconfig %s (make e2e brings up the local cluster): %w", s.kubeconfig, err)
	}
	cfg.QPS, cfg.Burst = 50, 100
	if s.client, err = kubernetes.NewForConfig(cfg); err != nil {
		return nil, err
	}
	if s.dynamic, err = dynamic.NewForConfig(cfg); err != nil {
		return nil, err
	}
	nodes, err := s.client.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("the cluster of %s does not answer: %w", s.kubeconfig, err)
	}
	if len(nodes.Items) != 1 {
		return nil, fmt.Errorf("the tests expect a single-node cluster, this one has %d nodes", len(nodes.Items))
	}
	n := nodes.Items[0]
	s.node, s.zone = n.Name, n.Labels["topology.kubernetes.io/zone"]
	s.instanceID = n.Spec.ProviderID[strings.LastIndex(n.Spec.ProviderID, "/")+1:]
	if s.zone == "" || !strings.HasPrefix(s.instanceID, "i-") {
		return nil, fmt.Errorf("node %s has no zone label or no EC2 providerID (%q)", n.Name, n.Spec.ProviderID)
	}
	if s.driver, err = findDriverRuntime(context.Background(), s); err != nil {
		return nil, err
	}
	fmt.Fprintf(os.Stderr, "e2e: Diskplane runs as %s\n", s.driver)
	return s, nil
}

// waitForNoLeaks returns the EC2 volumes and snapshots that exist now but did
// not before the tests, once none is left or leakTimeout has passed.
func (s *suite) waitForNoLeaks(ctx context.Context, before []string) []string {
	var leaked []string
	deadline := time.Now().Add(leakTimeout)
	for {
		now, err := s.emulator.resourceIDs(ctx)
		if err != nil {
			return []string{"cannot list the emulator's volumes: " + err.Error()}
		}
		leaked = leaked[:0]
		for _, id := range now {
			if !slices.Contains(before, id) {
				leaked = append(leaked, id)
			}
		}
		if len(leaked) == 0 || time.Now().After(deadline) {
			return leaked
		}
		time.Sleep(2 * time.Second)
	}
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}
