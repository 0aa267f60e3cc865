//go:build e2e_install

package install

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/diskplane/diskplane/pkg/emulator/admin"
	"github.com/diskplane/diskplane/pkg/emulator/model"
	"github.com/diskplane/diskplane/tests/e2e/kubetest"
	"github.com/diskplane/diskplane/tests/e2e/poll"
)

// Kubernetes' own bound on a detach the kubelet never confirms: after a node
// stops answering, the attach/detach controller force-detaches after six
// minutes (maxWaitForUnmountDuration). A drain must never come near it.
const forceDetachAfter = 6 * time.Minute

// drainedPodStopSeconds is how long the drained workload takes to stop after
// SIGTERM: its volume cannot be unmounted before, so a node plugin that
// exited when it was told to would be gone well before that unmount.
const drainedPodStopSeconds = 10

// TestDrain drains the node the way a node's removal does, with a pod using
// a volume: the node is cordoned, the node plugin is told to stop (as the
// node's shutdown or deletion stops its DaemonSet pods) and the workload is
// evicted. The plugin's preStop hook keeps it serving until the volume is
// unmounted and detached: the VolumeAttachment goes and the EC2 volume is
// available far sooner than Kubernetes' six-minute forced detach, and the
// old plugin pod is gone only after the detach, though the workload took
// drainedPodStopSeconds to stop. The local cluster has a single node,
// which runs the controller too, so the drain evicts the workload alone
// (kubectl drain --pod-selector): in production the controller runs on
// other nodes, and a drain of its own node moves it through its
// PodDisruptionBudget (TestLeaderFailover); evicting it here would leave
// nothing to detach the volume, and the hook would wait out the grace
// period.
func TestDrain(t *testing.T) {
	ctx := t.Context()
	class := claimStorageClass(t)
	ns := newNamespace(t, "drain")
	createClaim(t, ns, class, "1Gi")
	if _, err := env.client.CoreV1().Pods(ns).Create(ctx, drainedPod(), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	podReady(t, ns, "app")
	pv := boundVolume(t, ns, "data")
	volumeID := volumeHandle(t, pv)
	va := volumeAttachmentOf(t, pv)
	plugin := nodePluginPod(t)
	t.Logf("volume %s (%s) attached through VolumeAttachment %s; node plugin pod %s", pv, volumeID, va, plugin.Name)

	t.Cleanup(func() { uncordon(t) })
	if _, err := kubectl(ctx, "cordon", env.node); err != nil {
		t.Fatal(err)
	}
	logs := followLog(t, plugin.Name)
	start := time.Now()
	if err := env.client.CoreV1().Pods(env.namespace).Delete(ctx, plugin.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatalf("stop the node plugin: %v", err)
	}
	drained := make(chan error, 1)
	go func() {
		// --force: the workload is a bare pod, which a drain otherwise refuses to evict.
		_, err := kubectl(context.Background(), "drain", env.node, "--pod-selector=app=drain-test", "--ignore-daemonsets",
			"--delete-emptydir-data", "--force", "--timeout=5m")
		drained <- err
	}()

	var detached, available, pluginGone time.Duration
	var drainErr error
	drainDone := false
	deadline := time.Now().Add(forceDetachAfter)
	for detached == 0 || available == 0 || pluginGone == 0 {
		select {
		case drainErr = <-drained:
			drainDone = true
			if drainErr != nil {
				t.Fatalf("kubectl drain: %v", drainErr)
			}
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s after the drain started: VolumeAttachment gone %v, EC2 volume available %v, old node plugin gone %v",
				forceDetachAfter, detached > 0, available > 0, pluginGone > 0)
		}
		now := time.Since(start)
		if detached == 0 {
			if _, err := env.client.StorageV1().VolumeAttachments().Get(ctx, va, metav1.GetOptions{}); apierrors.IsNotFound(err) {
				detached = now
			}
		}
		if available == 0 && volumeAvailable(t, volumeID) {
			available = now
		}
		if pluginGone == 0 {
			p, err := env.client.CoreV1().Pods(env.namespace).Get(ctx, plugin.Name, metav1.GetOptions{})
			if apierrors.IsNotFound(err) || (err == nil && p.UID != plugin.UID) {
				pluginGone = now
			}
		}
		time.Sleep(250 * time.Millisecond)
	}
	if !drainDone {
		if err := <-drained; err != nil {
			t.Errorf("kubectl drain: %v", err)
		}
	}
	t.Logf("after the node plugin was told to stop and the workload evicted: VolumeAttachment gone %s, EC2 volume available %s, old node plugin gone %s",
		detached.Round(100*time.Millisecond), available.Round(100*time.Millisecond), pluginGone.Round(100*time.Millisecond))
	if detached > 2*time.Minute {
		t.Errorf("the volume was detached %s after the drain started; want well before the six-minute forced detach", detached)
	}
	if pluginGone < detached {
		t.Errorf("the old node plugin was gone %s after it was told to stop, before the volume was detached (%s): it did not wait", pluginGone, detached)
	}
	if pluginGone < drainedPodStopSeconds*time.Second {
		t.Errorf("the old node plugin was gone %s after it was told to stop, before the workload could have been unmounted", pluginGone)
	}
	log := logs()
	for _, want := range []string{"Waiting before the plugin stops until the node's volumes are unmounted and detached", va,
		"No volume of the driver is attached to the node any more"} {
		if !strings.Contains(log, want) {
			t.Errorf("the old node plugin's log lacks %q:\n%s", want, log)
		}
	}
}

// drainedPod is the workload of TestDrain: it mounts the claim "data" and,
// told to stop, takes drainedPodStopSeconds to do so.
func drainedPod() *corev1.Pod {
	p := writerPod("drain")
	p.Labels = map[string]string{"app": "drain-test"}
	grace := int64(3 * drainedPodStopSeconds)
	p.Spec.TerminationGracePeriodSeconds = &grace
	p.Spec.Containers[0].Command = []string{"sh", "-c", fmt.Sprintf(
		"trap 'sleep %d; exit 0' TERM; while true; do date >> /data/log; sleep 1 & wait $!; done", drainedPodStopSeconds)}
	return p
}

func volumeHandle(t *testing.T, pv string) string {
	t.Helper()
	v, err := env.client.CoreV1().PersistentVolumes().Get(t.Context(), pv, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return v.Spec.CSI.VolumeHandle
}

// volumeAttachmentOf returns the name of the VolumeAttachment of the
// PersistentVolume on the node.
func volumeAttachmentOf(t *testing.T, pv string) string {
	t.Helper()
	list, err := env.client.StorageV1().VolumeAttachments().List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, va := range list.Items {
		if src := va.Spec.Source.PersistentVolumeName; src != nil && *src == pv && va.Spec.NodeName == env.node {
			return va.Name
		}
	}
	t.Fatalf("no VolumeAttachment of %s on %s", pv, env.node)
	return ""
}

// nodePluginPod returns the node plugin's pod on the node.
func nodePluginPod(t *testing.T) corev1.Pod {
	t.Helper()
	pods, err := env.client.CoreV1().Pods(env.namespace).List(t.Context(), metav1.ListOptions{
		LabelSelector: appSelector + ",app.kubernetes.io/component=node", FieldSelector: "spec.nodeName=" + env.node})
	if err != nil {
		t.Fatal(err)
	}
	if len(pods.Items) != 1 {
		t.Fatalf("%d node plugin pods on %s, want 1", len(pods.Items), env.node)
	}
	return pods.Items[0]
}

// followLog follows the plugin container's log of a pod until it stops
// (kubectl logs -f); the function returned waits for that and returns what
// was logged.
func followLog(t *testing.T, pod string) func() string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), forceDetachAfter)
	cmd := exec.CommandContext(ctx, env.kubectl, "--kubeconfig", env.kubeconfig, "logs", "-f", "-n", env.namespace, pod,
		"-c", pluginContainer, "--since=1s")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var (
		mu    sync.Mutex
		lines []string
		done  = make(chan struct{})
	)
	go func() {
		defer close(done)
		s := bufio.NewScanner(out)
		for s.Scan() {
			mu.Lock()
			lines = append(lines, s.Text())
			mu.Unlock()
		}
	}()
	return func() string {
		select {
		case <-done:
		case <-time.After(30 * time.Second):
		}
		cancel()
		_ = cmd.Wait()
		mu.Lock()
		defer mu.Unlock()
		return strings.Join(lines, "\n")
	}
}

// volumeAvailable reports whether the emulator holds the volume available,
// attached nowhere.
func volumeAvailable(t *testing.T, id string) bool {
	t.Helper()
	resp, err := http.Get(emulatorAdmin + admin.PathVolumes)
	if err != nil {
		t.Fatalf("the emulator's admin API: %v", err)
	}
	defer resp.Body.Close()
	var vols []model.Volume
	if err := json.NewDecoder(resp.Body).Decode(&vols); err != nil {
		t.Fatal(err)
	}
	for _, v := range vols {
		if v.ID == id {
			return v.State == model.VolumeAvailable && len(v.Attachments) == 0
		}
	}
	t.Fatalf("the emulator has no volume %s", id)
	return false
}

// uncordon makes the node schedulable again and waits until the node
// plugin runs there again and the kubelet lists the driver.
func uncordon(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), rolloutTimeout)
	defer cancel()
	if _, err := kubectl(ctx, "uncordon", env.node); err != nil {
		t.Errorf("cleanup: %v", err)
	}
	// t.Context() has ended when cleanups run: poll with one of their own.
	err := poll.Until(ctx, rolloutTimeout, func(ctx context.Context) (bool, string, error) {
		ok, state, err := rolledOut(ctx)
		if !ok || err != nil {
			return ok, state, err
		}
		registered, err := driverRegistered(ctx)
		return registered, "driver not registered yet", err
	})
	if err != nil {
		t.Errorf("cleanup: Diskplane did not come back on the uncordoned node: %v", err)
	}
}

// emulatorAdmin is the EC2 emulator's admin API (a host process beside the
// cluster).
var emulatorAdmin = kubetest.EnvOr("E2E_EMULATOR_ADMIN", "http://127.0.0.1:8702")
