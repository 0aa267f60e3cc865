//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/diskplane/diskplane/tests/e2e/poll"
)

// driverRuntime is how the Diskplane under test runs: as host processes
// (make e2e: hack/e2e/driver.sh) or installed into the cluster (make
// e2e-helm, make e2e-kustomize: the chart's controller Deployment and node
// DaemonSet). The tests are the same; only crashing the driver, waiting for
// it to come back and reading its log differ.
type driverRuntime interface {
	// crashController kills the plugin process that serves the controller's
	// RPCs with SIGKILL, as a crash would, and waits until it is gone.
	crashController(t *testing.T)
	// recoverController waits until the controller serves again after
	// crashController, starting it again where nothing else would.
	recoverController(ctx context.Context) error
	// ensureRunning leaves the driver running, whatever a test did to it.
	ensureRunning(ctx context.Context) error
	// logTail returns the last lines of the plugin's log, for a failed
	// test's diagnosis.
	logTail(ctx context.Context, lines int) string
	// controllerSocket is the host path of the CSI socket of a plugin that
	// serves the Controller service, for a test that asks it directly.
	controllerSocket(ctx context.Context) (string, error)
	// String says where the driver runs, for the test log.
	String() string
}

// controllerSelector selects the pods of the chart's controller Deployment
// (and of the kustomize base rendered from it).
const controllerSelector = "app.kubernetes.io/name=diskplane,app.kubernetes.io/component=controller"

// pluginContainer is the plugin's container in the controller and node pods.
const pluginContainer = "diskplane"

// kubeletDir is the local cluster's kubelet root directory
// (hack/local-cluster/lib.sh).
const kubeletDir = "/var/lib/kubelet"

// findDriverRuntime asks the cluster how Diskplane runs: a controller pod
// whose plugin serves this driver name means an in-cluster install;
// otherwise the driver runs as host processes.
func findDriverRuntime(ctx context.Context, s *suite) (driverRuntime, error) {
	pods, err := s.client.CoreV1().Pods("").List(ctx, metav1.ListOptions{LabelSelector: controllerSelector})
	if err != nil {
		return nil, fmt.Errorf("list Diskplane controller pods: %w", err)
	}
	for _, p := range pods.Items {
		for _, c := range p.Spec.Containers {
			if c.Name == pluginContainer && slices.Contains(c.Args, "--driver-name="+s.driverName) {
				return &clusterPods{suite: s, namespace: p.Namespace}, nil
			}
		}
	}
	return &hostProcesses{suite: s}, nil
}

// hostProcesses is Diskplane run by hack/e2e/driver.sh: the plugin in all
// mode and the sidecars as host processes recorded in the cluster's
// run/pids.
type hostProcesses struct {
	suite *suite
}

func (h *hostProcesses) String() string { return "host processes (hack/e2e/driver.sh)" }

// crashController sends SIGKILL to the plugin that hack/local-cluster/driver.sh
// recorded, after checking that the PID still runs that binary, and waits
// until it is gone.
func (h *hostProcesses) crashController(t *testing.T) {
	t.Helper()
	file := filepath.Join(h.suite.clusterDir, "run", "pids", "driver-plugin.pid")
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatalf("the plugin's PID: %v", err)
	}
	fields := strings.Fields(string(b))
	if len(fields) != 2 {
		t.Fatalf("%s: %q, want \"PID EXE\"", file, b)
	}
	pid, err := strconv.Atoi(fields[0])
	if err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	runs := func() bool {
		exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
		return err == nil && strings.TrimSuffix(exe, " (deleted)") == fields[1]
	}
	if !runs() {
		t.Fatalf("PID %d of %s is not running %s", pid, file, fields[1])
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatalf("kill the plugin (PID %d): %v", pid, err)
	}
	if err := poll.Until(t.Context(), time.Minute, func(context.Context) (bool, string, error) {
		return !runs(), "still running", nil
	}); err != nil {
		t.Fatalf("the plugin (PID %d) did not die: %v", pid, err)
	}
	t.Logf("killed the plugin (PID %d) during provisioning", pid)
}

// recoverController starts the plugin and the sidecars again: nothing
// restarts a host process by itself.
func (h *hostProcesses) recoverController(ctx context.Context) error { return h.script(ctx, "restart") }

func (h *hostProcesses) ensureRunning(ctx context.Context) error { return h.script(ctx, "up") }

// script runs hack/e2e/driver.sh with the environment of the test run (the
// same settings make e2e gave hack/e2e/up.sh).
func (h *hostProcesses) script(ctx context.Context, action string) error {
	cmd := exec.CommandContext(ctx, filepath.Join(h.suite.repo, "hack", "e2e", "driver.sh"), action)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("hack/e2e/driver.sh %s: %w\n%s", action, err, out)
	}
	return nil
}

// controllerSocket is the socket hack/local-cluster/driver.sh serves the
// plugin (all mode) on, in the kubelet's plugin directory.
func (h *hostProcesses) controllerSocket(context.Context) (string, error) {
	return filepath.Join(kubeletDir, "plugins", h.suite.driverName, "csi.sock"), nil
}

func (h *hostProcesses) logTail(_ context.Context, lines int) string {
	file := filepath.Join(h.suite.clusterDir, "run", "logs", "driver-plugin.log")
	b, err := os.ReadFile(file)
	if err != nil {
		return err.Error()
	}
	all := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return file + ":\n" + strings.Join(all[max(0, len(all)-lines):], "\n")
}

// clusterPods is Diskplane installed into the cluster: the controller
// Deployment's pods and the node DaemonSet's, in namespace.
type clusterPods struct {
	suite     *suite
	namespace string
	// restarts holds, per controller pod crashController killed, its
	// plugin container's restart count before the kill.
	restarts map[string]int32
}

func (c *clusterPods) String() string {
	return "in the cluster (namespace " + c.namespace + ", the controller Deployment and node DaemonSet)"
}

func (c *clusterPods) controllerPods(ctx context.Context) ([]corev1.Pod, error) {
	pods, err := c.suite.client.CoreV1().Pods(c.namespace).List(ctx, metav1.ListOptions{LabelSelector: controllerSelector})
	if err != nil {
		return nil, fmt.Errorf("list the controller pods: %w", err)
	}
	return pods.Items, nil
}

// crashController kills the plugin container of every controller pod from
// the host, with SIGKILL to its processes (found by the container ID in
// their cgroup): a crash, which the kubelet answers by restarting the
// container, as in production. (A signal from inside the container cannot
// do it: the plugin is the PID namespace's init, which ignores SIGKILL sent
// from within.) The tests run on the node itself, as root.
func (c *clusterPods) crashController(t *testing.T) {
	t.Helper()
	pods, err := c.controllerPods(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	c.restarts = map[string]int32{}
	for _, p := range pods {
		status := containerStatus(&p, pluginContainer)
		if status == nil || status.State.Running == nil {
			t.Fatalf("controller pod %s: its %s container is not running", p.Name, pluginContainer)
		}
		_, id, ok := strings.Cut(status.ContainerID, "://")
		if !ok || id == "" {
			t.Fatalf("controller pod %s: container ID %q", p.Name, status.ContainerID)
		}
		pids := containerPIDs(id)
		if len(pids) == 0 {
			t.Fatalf("controller pod %s: no process on this host runs its container %s (do the tests run on the node?)", p.Name, id)
		}
		for _, pid := range pids {
			if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
				t.Fatalf("kill PID %d of controller pod %s: %v", pid, p.Name, err)
			}
		}
		if err := poll.Until(t.Context(), time.Minute, func(context.Context) (bool, string, error) {
			left := containerPIDs(id)
			return len(left) == 0, fmt.Sprintf("PIDs %v still run", left), nil
		}); err != nil {
			t.Fatalf("the plugin of controller pod %s did not die: %v", p.Name, err)
		}
		c.restarts[p.Name] = status.RestartCount
		t.Logf("killed the plugin container of controller pod %s (PIDs %v) during provisioning", p.Name, pids)
	}
}

// recoverController waits until the kubelet has restarted every plugin
// container crashController killed and the pods are Ready again.
func (c *clusterPods) recoverController(ctx context.Context) error {
	return poll.Until(ctx, podTimeout, func(ctx context.Context) (bool, string, error) {
		for name, before := range c.restarts {
			p, err := c.suite.client.CoreV1().Pods(c.namespace).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, "", err
			}
			status := containerStatus(p, pluginContainer)
			if status == nil || status.RestartCount <= before {
				return false, fmt.Sprintf("pod %s: the plugin container has not restarted yet", name), nil
			}
			if !poll.PodReady(p) {
				return false, "pod " + name + ": " + podState(p), nil
			}
		}
		return true, "", nil
	})
}

// ensureRunning waits until every controller pod is Ready: the kubelet
// restarts what died.
func (c *clusterPods) ensureRunning(ctx context.Context) error {
	return poll.Until(ctx, podTimeout, func(ctx context.Context) (bool, string, error) {
		pods, err := c.controllerPods(ctx)
		if err != nil || len(pods) == 0 {
			return false, "no controller pod", err
		}
		for _, p := range pods {
			if !poll.PodReady(&p) {
				return false, "pod " + p.Name + ": " + podState(&p), nil
			}
		}
		return true, "", nil
	})
}

// controllerSocket is the socket of a Ready controller pod's plugin: its
// socket-dir emptyDir, on the host below the kubelet's pod directory.
func (c *clusterPods) controllerSocket(ctx context.Context) (string, error) {
	pods, err := c.controllerPods(ctx)
	if err != nil {
		return "", err
	}
	for _, p := range pods {
		if poll.PodReady(&p) {
			return filepath.Join(kubeletDir, "pods", string(p.UID), "volumes", "kubernetes.io~empty-dir", "socket-dir", "csi.sock"), nil
		}
	}
	return "", fmt.Errorf("no Ready controller pod among %d", len(pods))
}

// logTail returns the end of the plugin's log in every Diskplane pod
// (controller and node).
func (c *clusterPods) logTail(ctx context.Context, lines int) string {
	out, err := kubectl(ctx, "logs", "-n", c.namespace, "-l", "app.kubernetes.io/name=diskplane",
		"-c", pluginContainer, "--prefix", "--tail", strconv.Itoa(lines))
	return out + errOrEmpty(err)
}

func containerStatus(p *corev1.Pod, name string) *corev1.ContainerStatus {
	for i := range p.Status.ContainerStatuses {
		if p.Status.ContainerStatuses[i].Name == name {
			return &p.Status.ContainerStatuses[i]
		}
	}
	return nil
}

// containerPIDs lists the host's processes whose cgroup names the
// container ID (containerd puts each container in a cgroup named after it).
func containerPIDs(id string) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cgroup"))
		if err == nil && strings.Contains(string(b), id) {
			pids = append(pids, pid)
		}
	}
	return pids
}
