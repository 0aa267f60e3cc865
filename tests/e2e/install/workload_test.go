//go:build e2e_install

package install

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/diskplane/diskplane/tests/e2e/kubetest"
	"github.com/diskplane/diskplane/tests/e2e/poll"
)

// newNamespace creates a namespace for the test and deletes it, with the
// claims in it and their volumes, when the test ends.
func newNamespace(t *testing.T, prefix string) string {
	t.Helper()
	return kubetest.NewNamespace(t, env.client, prefix, 2*podTimeout)
}

// claimStorageClass returns a StorageClass of the driver for the test's
// claims: one the installation made (the chart's values can list some), or
// else, as after a kustomize install of the base, which makes none, one
// the test makes and deletes when it ends. Call it before newNamespace, so
// that the class outlives the claims.
func claimStorageClass(t *testing.T) string {
	t.Helper()
	if name := driverStorageClass(t, appSelector); name != "" {
		return name
	}
	return kubetest.StorageClass(t, env.client, "diskplane-install", env.driverName, map[string]string{"type": "gp3"},
		storagev1.VolumeBindingWaitForFirstConsumer)
}

// createClaim creates the claim "data" of size in the namespace, of the
// StorageClass class, for writerPod.
func createClaim(t *testing.T, ns, class, size string) {
	t.Helper()
	claim := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "data"},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			StorageClassName: &class,
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{
				corev1.ResourceStorage: resource.MustParse(size)}},
		},
	}
	if _, err := env.client.CoreV1().PersistentVolumeClaims(ns).Create(t.Context(), claim, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// writerPod, named app, mounts the claim "data" at /data, writes the marker
// to /data/before when it starts (unless the file is there) and then waits;
// it stops at once on SIGTERM.
func writerPod(marker string) *corev1.Pod {
	grace := int64(1)
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "app"},
		Spec: corev1.PodSpec{
			TerminationGracePeriodSeconds: &grace,
			Containers: []corev1.Container{{
				Name: "app",
				// The local cluster's busybox, imported, never pulled.
				Image:           "docker.io/library/busybox:latest",
				ImagePullPolicy: corev1.PullIfNotPresent,
				Command: []string{"sh", "-c", fmt.Sprintf(
					"test -f /data/before || { echo %s > /data/before && sync; }; trap 'exit 0' TERM; while true; do sleep 5 & wait $!; done", marker)},
				VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: "/data"}},
			}},
			Volumes: []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{
				PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "data"}}}},
		},
	}
}

func podReady(t *testing.T, ns, name string) *corev1.Pod {
	t.Helper()
	var pod *corev1.Pod
	waitFor(t, "pod "+name+" Ready", podTimeout, func(ctx context.Context) (bool, string, error) {
		p, err := env.client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		pod = p
		if err := poll.PodEnded(p); err != nil {
			return false, "", err
		}
		return poll.PodReady(p), string(p.Status.Phase), nil
	})
	return pod
}

func deletePod(t *testing.T, ns, name string) {
	t.Helper()
	grace := int64(1)
	if err := env.client.CoreV1().Pods(ns).Delete(t.Context(), name, metav1.DeleteOptions{GracePeriodSeconds: &grace}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "pod "+name+" gone (its volume unmounted)", podTimeout, func(ctx context.Context) (bool, string, error) {
		_, err := env.client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, "", nil
		}
		return false, "still there", err
	})
}

// boundVolume returns the name of the PersistentVolume the claim is bound to.
func boundVolume(t *testing.T, ns, claim string) string {
	t.Helper()
	c, err := env.client.CoreV1().PersistentVolumeClaims(ns).Get(t.Context(), claim, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if c.Status.Phase != corev1.ClaimBound || c.Spec.VolumeName == "" {
		t.Fatalf("claim %s is %s, want Bound", claim, c.Status.Phase)
	}
	return c.Spec.VolumeName
}

// execIn runs a shell command in the pod and returns its standard output.
func execIn(t *testing.T, ns, pod, command string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	out, err := kubectl(ctx, "exec", "-n", ns, pod, "--", "sh", "-c", command)
	if err != nil {
		t.Fatalf("exec in %s: %v", pod, err)
	}
	return out
}
