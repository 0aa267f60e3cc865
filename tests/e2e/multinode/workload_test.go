//go:build e2e_multinode

package multinode

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/diskplane/diskplane/pkg/emulator/disks"
	"github.com/diskplane/diskplane/pkg/emulator/model"
	"github.com/diskplane/diskplane/tests/e2e/kubetest"
)

// podTimeout bounds a pod's way to Ready: scheduling, provisioning or a
// move's detach, attach, format and mount.
const podTimeout = 5 * time.Minute

// image is the busybox the local cluster imports (nothing is pulled).
const image = "localhost/busybox:local"

// newNamespace creates a namespace for the test; when the test ends its
// workloads, pods and claims are deleted and the test waits until the
// driver deleted their volumes, so that no test leaves one attached.
func newNamespace(t *testing.T, prefix string) string {
	t.Helper()
	return kubetest.NewNamespace(t, env.client, prefix, podTimeout)
}

// dataScript runs in the data workload's container: on its first start it
// fills /data/blob with random bytes and records their checksum; on every
// start it appends the node it runs on to /data/nodes; then it waits. Its
// readiness probe checks the blob against the checksum, so Ready means the
// data written on an earlier node is intact.
const dataScript = `set -e
if [ ! -f /data/blob.md5 ]; then
  dd if=/dev/urandom of=/data/blob bs=1048576 count=8 2>/dev/null
  md5sum /data/blob > /data/blob.md5
fi
echo "$NODE_NAME" >> /data/nodes
sync
exec sleep 36000`

// dataStatefulSet is a StatefulSet of one pod with a 1 GiB claim from the
// cluster's StorageClass, confined to zone and, when prefer is set,
// preferring that node.
func dataStatefulSet(name, zone, prefer string) *appsv1.StatefulSet {
	return restoredStatefulSet(name, zone, prefer, "")
}

// restoredStatefulSet is dataStatefulSet with its claim restored from a
// VolumeSnapshot of a data workload's claim when snapshot is set.
func restoredStatefulSet(name, zone, prefer, snapshot string) *appsv1.StatefulSet {
	one, grace := int32(1), int64(1)
	labels := map[string]string{"app": name}
	affinity := &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
		RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
			MatchExpressions: []corev1.NodeSelectorRequirement{{Key: corev1.LabelTopologyZone, Operator: corev1.NodeSelectorOpIn, Values: []string{zone}}},
		}}},
	}}
	if prefer != "" {
		affinity.NodeAffinity.PreferredDuringSchedulingIgnoredDuringExecution = []corev1.PreferredSchedulingTerm{{
			Weight: 100,
			Preference: corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{{
				Key: corev1.LabelHostname, Operator: corev1.NodeSelectorOpIn, Values: []string{prefer}}}},
		}}
	}
	return &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: appsv1.StatefulSetSpec{
			Replicas: &one,
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					TerminationGracePeriodSeconds: &grace,
					Affinity:                      affinity,
					Containers: []corev1.Container{{
						Name: "app", Image: image, ImagePullPolicy: corev1.PullNever,
						Command: []string{"sh", "-c", dataScript},
						Env: []corev1.EnvVar{{Name: "NODE_NAME", ValueFrom: &corev1.EnvVarSource{
							FieldRef: &corev1.ObjectFieldSelector{FieldPath: "spec.nodeName"}}}},
						VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: "/data"}},
						ReadinessProbe: &corev1.Probe{
							ProbeHandler:  corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"md5sum", "-c", "/data/blob.md5"}}},
							PeriodSeconds: 1,
						},
					}},
				},
			},
			VolumeClaimTemplates: []corev1.PersistentVolumeClaim{{
				ObjectMeta: metav1.ObjectMeta{Name: "data"},
				Spec: corev1.PersistentVolumeClaimSpec{
					AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
					StorageClassName: &env.storageClass,
					Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{
						corev1.ResourceStorage: resource.MustParse("1Gi")}},
					DataSource: snapshotSource(snapshot),
				},
			}},
		},
	}
}

// snapshotSource names a VolumeSnapshot as a claim's data source; nil for
// no snapshot.
func snapshotSource(snapshot string) *corev1.TypedLocalObjectReference {
	if snapshot == "" {
		return nil
	}
	group := "snapshot.storage.k8s.io"
	return &corev1.TypedLocalObjectReference{APIGroup: &group, Kind: "VolumeSnapshot", Name: snapshot}
}

// manyStatefulSet is a data workload of n pods, each with its own volume,
// started all at once.
func manyStatefulSet(name, zone, prefer string, n int32) *appsv1.StatefulSet {
	set := dataStatefulSet(name, zone, prefer)
	set.Spec.Replicas = &n
	set.Spec.PodManagementPolicy = appsv1.ParallelPodManagement
	return set
}

// createDataStatefulSet creates the workload and waits for its pod.
func createDataStatefulSet(t *testing.T, ns, name, zone, prefer string) *corev1.Pod {
	t.Helper()
	return createStatefulSet(t, ns, dataStatefulSet(name, zone, prefer))
}

// createStatefulSet creates a workload of one pod and waits for the pod.
func createStatefulSet(t *testing.T, ns string, set *appsv1.StatefulSet) *corev1.Pod {
	t.Helper()
	name := set.Name
	if _, err := env.client.AppsV1().StatefulSets(ns).Create(t.Context(), set, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod, _ := waitPodReady(t, ns, name+"-0", "", "")
	return pod
}

// waitPodReady waits until the pod of that name is Ready, is not the pod
// with UID old and does not run on node notOn, and says how long it took.
func waitPodReady(t *testing.T, ns, name string, old types.UID, notOn string) (*corev1.Pod, time.Duration) {
	t.Helper()
	return waitPodReadyWithin(t, ns, name, old, notOn, podTimeout)
}

// podEvents is the last few events of an object, for a wait's state.
func podEvents(ctx context.Context, ns, name string) string {
	events, err := env.client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + name})
	if err != nil || len(events.Items) == 0 {
		return "no events"
	}
	items := events.Items
	slices.SortFunc(items, func(a, b corev1.Event) int { return eventTime(a).Compare(eventTime(b)) })
	var out []string
	for _, e := range items[max(0, len(items)-3):] {
		out = append(out, e.Reason+": "+e.Message)
	}
	return strings.Join(out, "; ")
}

// eventTime is when an event last happened: the scheduler's events carry
// only an EventTime, the kubelet's a LastTimestamp.
func eventTime(e corev1.Event) time.Time {
	switch {
	case !e.LastTimestamp.IsZero():
		return e.LastTimestamp.Time
	case !e.EventTime.IsZero():
		return e.EventTime.Time
	}
	return e.CreationTimestamp.Time
}

// claimVolume is the EC2 volume ID behind a bound claim.
func claimVolume(t *testing.T, ns, claim string) string {
	t.Helper()
	c, err := env.client.CoreV1().PersistentVolumeClaims(ns).Get(t.Context(), claim, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pv, err := env.client.CoreV1().PersistentVolumes().Get(t.Context(), c.Spec.VolumeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return pv.Spec.CSI.VolumeHandle
}

// workerNamed is the worker of a node name.
func workerNamed(t *testing.T, node string) worker {
	t.Helper()
	for _, w := range env.workers {
		if w.name == node {
			return w
		}
	}
	t.Fatalf("node %q is not a worker of the cluster", node)
	return worker{}
}

// zoneWithTwoWorkers returns a zone that has at least two workers, and them.
func zoneWithTwoWorkers(t *testing.T) (string, []worker) {
	t.Helper()
	byZone := map[string][]worker{}
	for _, w := range env.workers {
		byZone[w.zone] = append(byZone[w.zone], w)
	}
	for _, zone := range slices.Sorted(maps.Keys(byZone)) {
		if len(byZone[zone]) >= 2 {
			return zone, byZone[zone]
		}
	}
	t.Fatal("no zone has two workers")
	return "", nil
}

// attachedInstances are the instances the emulator says a volume is
// attached to (in any attachment state).
func attachedInstances(ctx context.Context, volumeID string) ([]string, error) {
	volumes, err := env.emulator.Volumes(ctx)
	if err != nil {
		return nil, err
	}
	for _, v := range volumes {
		if v.ID == volumeID {
			var out []string
			for _, a := range v.Attachments {
				out = append(out, a.InstanceID)
			}
			slices.Sort(out)
			return out, nil
		}
	}
	return nil, fmt.Errorf("the emulator has no volume %s", volumeID)
}

// checkOnlyOn checks that the volume is attached to exactly these nodes'
// instances, and that only those nodes have its by-id link in their /dev.
func checkOnlyOn(t *testing.T, volumeID string, nodes ...string) {
	t.Helper()
	var want []string
	for _, n := range nodes {
		want = append(want, workerNamed(t, n).instanceID)
	}
	slices.Sort(want)
	got, err := attachedInstances(t.Context(), volumeID)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, want) {
		t.Errorf("volume %s is attached to %v, want %v (%v)", volumeID, got, want, nodes)
	}
	for _, w := range env.workers {
		_, err := os.Lstat(filepath.Join(w.linkDir, disks.LinkName(volumeID)))
		if has, should := err == nil, slices.Contains(nodes, w.name); has != should {
			t.Errorf("%s has the by-id link of %s: %v, want %v", w.name, volumeID, has, should)
		}
	}
}

// neverShared checks the emulator's audit: the volume was never attached to
// two instances at once.
func neverShared(t *testing.T, volumeID string) {
	t.Helper()
	audit, err := env.emulator.Audit(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if n := audit.SharedVolumes[volumeID]; n > 0 {
		t.Errorf("volume %s was attached to %d instances at once", volumeID, n)
	}
}

// moveFloor is the least a move of a volume between nodes can take in this
// cluster: the emulator's detach and attach (its default latencies), before
// the mount and the container start.
func moveFloor() time.Duration {
	l := model.DefaultLatencies()
	return l.Detach + l.Attach
}

// cordon marks a node unschedulable or schedulable again.
func cordon(t *testing.T, node string, unschedulable bool) {
	t.Helper()
	patch := fmt.Sprintf(`{"spec":{"unschedulable":%t}}`, unschedulable)
	if _, err := env.client.CoreV1().Nodes().Patch(context.Background(), node, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
}

// hostDevice is the major and minor number of the loop device the emulator
// backs an attached volume with.
func hostDevice(t *testing.T, volumeID string) (major, minor string) {
	t.Helper()
	volumes, err := env.emulator.Volumes(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range volumes {
		if v.ID != volumeID {
			continue
		}
		for _, a := range v.Attachments {
			if n, ok := strings.CutPrefix(a.HostDevice, "/dev/loop"); ok {
				return "7", n
			}
		}
	}
	t.Fatalf("volume %s has no loop device on the host", volumeID)
	return "", ""
}

// nodePluginPod is Diskplane's node plugin pod on a node.
func nodePluginPod(t *testing.T, node string) corev1.Pod {
	t.Helper()
	pods, err := env.client.CoreV1().Pods("").List(t.Context(), metav1.ListOptions{
		LabelSelector: "app.kubernetes.io/name=diskplane,app.kubernetes.io/component=node",
		FieldSelector: "spec.nodeName=" + node,
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(pods.Items) != 1 {
		t.Fatalf("%d node plugin pods on %s, want 1", len(pods.Items), node)
	}
	return pods.Items[0]
}
