//go:build e2e_install

package install

import (
	"context"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/diskplane/diskplane/tests/e2e/poll"
)

// Bounds of the waits around the upgrade: they only bound a wait; no test
// asserts how long anything took.
const (
	podTimeout     = 4 * time.Minute
	rolloutTimeout = 5 * time.Minute
)

// TestUpgrade runs `helm upgrade --reuse-values` with a different log
// verbosity of the controller and the node plugin and a different worker
// count of the provisioner, while a pod writes to a volume of the
// release's StorageClass. The upgrade must roll the controller Deployment
// and the node DaemonSet (new pods, with the new flags) and leave the pod
// alone: the same pod and container, not restarted, its volume still the
// very same mount (the kubelet's mount of it on the host keeps its mount
// ID), the data written before readable and new data writable. Then the
// pod is deleted and created again, so the new node plugin unmounts and
// mounts the volume: the data is still there.
func TestUpgrade(t *testing.T) {
	if env.method != byHelm {
		t.Fatalf("Diskplane was installed with %s; this test upgrades a Helm release", env.method)
	}
	ctx := t.Context()
	class := releaseStorageClass(t)
	ns := newNamespace(t, "install-upgrade")
	marker := "diskplane-upgrade-" + ns
	createClaim(t, ns, class, "4Gi")
	app := writerPod(marker)
	if _, err := env.client.CoreV1().Pods(ns).Create(ctx, app, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	before := podReady(t, ns, app.Name)
	pvName := boundVolume(t, ns, "data")
	beforeMounts := hostMounts(t, before.UID, pvName)
	if len(beforeMounts) == 0 {
		t.Fatalf("no mount of volume %s for pod %s on this host (do the tests run on the node?)", pvName, before.Name)
	}
	podMount := execIn(t, ns, app.Name, "grep ' /data ' /proc/mounts")
	if got := strings.TrimSpace(execIn(t, ns, app.Name, "cat /data/before")); got != marker {
		t.Fatalf("/data/before holds %q before the upgrade, want %q", got, marker)
	}
	oldPods := diskplanePodUIDs(t)

	level, workers := newValues(t)
	start := time.Now()
	out, err := helm(ctx, "upgrade", env.release, env.repo+"/charts/diskplane", "--namespace", env.namespace, "--reuse-values",
		"--set", "controller.logLevel="+level, "--set", "node.logLevel="+level,
		"--set", "sidecars.provisioner.workerThreads="+workers)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("helm upgrade (controller and node --v=%s, provisioner --worker-threads=%s):\n%s", level, workers, out)
	waitFor(t, "the upgrade rolled out (every Diskplane pod replaced and Ready, the driver registered)", rolloutTimeout,
		func(ctx context.Context) (bool, string, error) {
			if done, state, err := rolledOut(ctx); !done || err != nil {
				return false, state, err
			}
			now, err := diskplanePods(ctx)
			if err != nil {
				return false, "", err
			}
			for _, p := range now {
				if slices.Contains(oldPods, p.UID) || p.DeletionTimestamp != nil {
					return false, "pod " + p.Name + " of before the upgrade still runs", nil
				}
			}
			ok, err := driverRegistered(ctx)
			return ok, "the driver is not registered again", err
		})
	t.Logf("helm upgrade to rolled out: %s", time.Since(start).Round(100*time.Millisecond))
	checkUpgradedFlags(t, level, workers)

	after, err := env.client.CoreV1().Pods(ns).Get(ctx, app.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	b, a := before.Status.ContainerStatuses[0], after.Status.ContainerStatuses[0]
	if after.UID != before.UID || a.ContainerID != b.ContainerID || a.RestartCount != b.RestartCount || !poll.PodReady(after) {
		t.Fatalf("pod %s after the upgrade: UID %s container %s restarts %d ready %v; before: UID %s container %s restarts %d",
			app.Name, after.UID, a.ContainerID, a.RestartCount, poll.PodReady(after), before.UID, b.ContainerID, b.RestartCount)
	}
	if got := hostMounts(t, before.UID, pvName); !slices.Equal(got, beforeMounts) {
		t.Fatalf("the kubelet's mounts of volume %s changed during the upgrade:\nbefore %q\nafter  %q", pvName, beforeMounts, got)
	}
	if got := execIn(t, ns, app.Name, "grep ' /data ' /proc/mounts"); got != podMount {
		t.Fatalf("/data in the pod is mounted as %q after the upgrade, %q before", got, podMount)
	}
	if got := strings.TrimSpace(execIn(t, ns, app.Name, "cat /data/before")); got != marker {
		t.Fatalf("/data/before holds %q after the upgrade, want %q", got, marker)
	}
	execIn(t, ns, app.Name, "echo "+marker+" > /data/after && sync")
	t.Logf("pod %s kept its container and the mount of %s; its data reads back and it writes", app.Name, pvName)

	// The new node plugin unmounts and mounts the volume again.
	deletePod(t, ns, app.Name)
	if _, err := env.client.CoreV1().Pods(ns).Create(ctx, writerPod(marker), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	podReady(t, ns, app.Name)
	if got := strings.TrimSpace(execIn(t, ns, app.Name, "cat /data/before /data/after")); got != marker+"\n"+marker {
		t.Fatalf("after the pod was created again by the upgraded driver, /data holds %q", got)
	}
}

// newValues picks a log verbosity and a provisioner worker count that
// differ from what runs, so that the upgrade changes both pod templates.
func newValues(t *testing.T) (level, workers string) {
	t.Helper()
	ds, err := env.client.AppsV1().DaemonSets(env.namespace).Get(t.Context(), nodeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	level = "5"
	if slices.Contains(containerArgs(ds.Spec.Template.Spec, pluginContainer), "--v=5") {
		level = "6"
	}
	d, err := env.client.AppsV1().Deployments(env.namespace).Get(t.Context(), controllerName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	workers = "50"
	if slices.Contains(containerArgs(d.Spec.Template.Spec, "csi-provisioner"), "--worker-threads=50") {
		workers = "60"
	}
	return level, workers
}

// checkUpgradedFlags checks that the running pods have the upgrade's flags.
func checkUpgradedFlags(t *testing.T, level, workers string) {
	t.Helper()
	pods, err := diskplanePods(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods {
		want := map[string]string{pluginContainer: "--v=" + level}
		if p.Labels["app.kubernetes.io/component"] == "controller" {
			want["csi-provisioner"] = "--worker-threads=" + workers
		}
		for container, flag := range want {
			if args := containerArgs(p.Spec, container); !slices.Contains(args, flag) {
				t.Errorf("pod %s container %s runs with %q, want %s", p.Name, container, args, flag)
			}
		}
	}
}

func containerArgs(spec corev1.PodSpec, name string) []string {
	for _, c := range spec.Containers {
		if c.Name == name {
			return c.Args
		}
	}
	return nil
}

// releaseStorageClass returns the name of a StorageClass the release made
// (hack/chart/values-local-cluster.yaml makes diskplane-gp3).
func releaseStorageClass(t *testing.T) string {
	t.Helper()
	name := driverStorageClass(t, appSelector+",app.kubernetes.io/instance="+env.release)
	if name == "" {
		t.Fatalf("release %s made no StorageClass of %s; install it with storageClasses (values-local-cluster.yaml has one)", env.release, env.driverName)
	}
	return name
}

// driverStorageClass names a StorageClass of the driver among those the
// label selector selects, or "" when there is none.
func driverStorageClass(t *testing.T, selector string) string {
	t.Helper()
	list, err := env.client.StorageV1().StorageClasses().List(t.Context(), metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		t.Fatal(err)
	}
	for _, sc := range list.Items {
		if sc.Provisioner == env.driverName {
			return sc.Name
		}
	}
	return ""
}

// hostMounts returns the lines of this host's mount table (mount ID
// included) of the kubelet's mount of the volume for the pod.
func hostMounts(t *testing.T, pod types.UID, pv string) []string {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	path := "/pods/" + string(pod) + "/volumes/kubernetes.io~csi/" + pv + "/mount"
	var out []string
	for line := range strings.SplitSeq(string(b), "\n") {
		if fields := strings.Fields(line); len(fields) > 4 && strings.HasSuffix(fields[4], path) {
			out = append(out, line)
		}
	}
	return out
}

// diskplanePods lists the controller's and the node plugin's pods.
func diskplanePods(ctx context.Context) ([]corev1.Pod, error) {
	pods, err := env.client.CoreV1().Pods(env.namespace).List(ctx, metav1.ListOptions{
		LabelSelector: appSelector + ",app.kubernetes.io/instance=" + env.release})
	if err != nil {
		return nil, err
	}
	return pods.Items, nil
}

func diskplanePodUIDs(t *testing.T) []types.UID {
	t.Helper()
	pods, err := diskplanePods(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	var uids []types.UID
	for _, p := range pods {
		uids = append(uids, p.UID)
	}
	if len(uids) < 2 {
		t.Fatalf("%d Diskplane pods run, want the controller's and the node plugin's", len(uids))
	}
	return uids
}
