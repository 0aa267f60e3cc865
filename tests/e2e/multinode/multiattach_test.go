//go:build e2e_multinode

package multinode

import (
	"context"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/diskplane/diskplane/tests/e2e/kubetest"
	"github.com/diskplane/diskplane/tests/e2e/poll"
)

// TestMultiAttachBlock shares an io2 volume with multi-attach between two
// pods on two workers of one zone, as a raw block device (ReadWriteMany):
// what one writes the other reads, and the volume is attached to both
// instances. The same access mode is refused, with a reason on the claim,
// for a filesystem and for a volume type without multi-attach.
func TestMultiAttachBlock(t *testing.T) {
	zone, _ := zoneWithTwoWorkers(t)
	io2 := storageClass(t, "io2", storagev1.VolumeBindingWaitForFirstConsumer)
	ns := newNamespace(t, "multiattach")
	createClaim(t, ns, "shared", io2, "4Gi", corev1.PersistentVolumeBlock)
	for _, name := range []string{"writer", "reader"} {
		if _, err := env.client.CoreV1().Pods(ns).Create(t.Context(), blockPod(name, "shared", zone), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	writer, _ := waitPodReady(t, ns, "writer", "", "")
	reader, _ := waitPodReady(t, ns, "reader", "", "")
	if writer.Spec.NodeName == reader.Spec.NodeName {
		t.Fatalf("both pods run on %s", writer.Spec.NodeName)
	}
	volumeID := claimVolume(t, ns, "shared")
	checkOnlyOn(t, volumeID, writer.Spec.NodeName, reader.Spec.NodeName)

	marker := kubetest.UniqueName(t, "written-on-"+writer.Spec.NodeName)
	write := fmt.Sprintf("printf %%s %s | dd of=/dev/xvda bs=512 seek=2048 conv=fsync 2>&1", marker)
	if out, err := kubectl(t.Context(), "exec", "-n", ns, "writer", "--", "sh", "-c", write); err != nil {
		t.Fatalf("write: %v %s", err, out)
	}
	read := fmt.Sprintf("dd if=/dev/xvda bs=512 skip=2048 count=1 2>/dev/null | head -c %d", len(marker))
	out, err := kubectl(t.Context(), "exec", "-n", ns, "reader", "--", "sh", "-c", read)
	if err != nil || out != marker {
		t.Fatalf("the reader on %s read %q (%v), want %q", reader.Spec.NodeName, out, err, marker)
	}

	gp3 := storageClass(t, "gp3", storagev1.VolumeBindingImmediate)
	io2Now := storageClass(t, "io2", storagev1.VolumeBindingImmediate)
	for _, tc := range []struct {
		claim, class string
		mode         corev1.PersistentVolumeMode
		reason       string
	}{
		{claim: "filesystem", class: io2Now, mode: corev1.PersistentVolumeFilesystem, reason: "needs a raw block volume"},
		{claim: "gp3", class: gp3, mode: corev1.PersistentVolumeBlock, reason: "needs volume type io2"},
	} {
		createClaim(t, ns, tc.claim, tc.class, "4Gi", tc.mode)
		waitClaimRefused(t, ns, tc.claim, tc.reason)
	}
}

// storageClass makes a StorageClass of the driver for one volume type,
// deleted when the test ends.
func storageClass(t *testing.T, volumeType string, binding storagev1.VolumeBindingMode) string {
	t.Helper()
	params := map[string]string{"type": volumeType}
	if volumeType == "io2" {
		params["iops"] = "1000"
	}
	return kubetest.StorageClass(t, env.client, "diskplane-"+volumeType, env.driverName, params, binding)
}

// createClaim creates a ReadWriteMany claim.
func createClaim(t *testing.T, ns, name, class, size string, mode corev1.PersistentVolumeMode) {
	t.Helper()
	claim := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany},
			StorageClassName: &class,
			VolumeMode:       &mode,
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{
				corev1.ResourceStorage: resource.MustParse(size)}},
		},
	}
	if _, err := env.client.CoreV1().PersistentVolumeClaims(ns).Create(t.Context(), claim, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// blockPod uses the claim as the raw device /dev/xvda, in the zone, never
// on the node of another pod of the same claim.
func blockPod(name, claim, zone string) *corev1.Pod {
	grace := int64(1)
	labels := map[string]string{"claim": claim}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		Spec: corev1.PodSpec{
			TerminationGracePeriodSeconds: &grace,
			Affinity: &corev1.Affinity{
				NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
					NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{{
						Key: corev1.LabelTopologyZone, Operator: corev1.NodeSelectorOpIn, Values: []string{zone}}}}}}},
				PodAntiAffinity: &corev1.PodAntiAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
					LabelSelector: &metav1.LabelSelector{MatchLabels: labels}, TopologyKey: corev1.LabelHostname}}},
			},
			Containers: []corev1.Container{{
				Name: "app", Image: image, ImagePullPolicy: corev1.PullNever,
				Command:       []string{"sleep", "36000"},
				VolumeDevices: []corev1.VolumeDevice{{Name: "shared", DevicePath: "/dev/xvda"}},
			}},
			Volumes: []corev1.Volume{{Name: "shared", VolumeSource: corev1.VolumeSource{
				PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim}}}},
		},
	}
}

// waitClaimRefused waits for the provisioner's ProvisioningFailed event on
// the claim, with a message that names the reason, and checks that the
// claim stays unbound.
func waitClaimRefused(t *testing.T, ns, claim, reason string) {
	t.Helper()
	err := poll.Until(t.Context(), podTimeout, func(ctx context.Context) (bool, string, error) {
		events, err := env.client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + claim})
		if err != nil {
			return false, "", err
		}
		for _, e := range events.Items {
			if e.Reason == "ProvisioningFailed" && strings.Contains(e.Message, reason) {
				t.Logf("claim %s refused: %s", claim, e.Message)
				return true, "", nil
			}
		}
		return false, podEvents(ctx, ns, claim), nil
	})
	if err != nil {
		t.Fatalf("claim %s: %v", claim, err)
	}
	c, err := env.client.CoreV1().PersistentVolumeClaims(ns).Get(t.Context(), claim, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if c.Status.Phase == corev1.ClaimBound {
		t.Errorf("claim %s was bound to %s", claim, c.Spec.VolumeName)
	}
}
