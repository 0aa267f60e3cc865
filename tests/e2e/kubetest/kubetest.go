// Package kubetest holds what the in-cluster end-to-end suites
// (tests/e2e/install and tests/e2e/multinode) do alike to a cluster: name
// their objects, run kubectl, make a namespace that takes its workloads and
// volumes with it when the test ends, and make a StorageClass of the
// driver for one test.
package kubetest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/diskplane/diskplane/tests/e2e/poll"
)

// UniqueName is prefix with a random suffix, for objects of one test run.
func UniqueName(t testing.TB, prefix string) string {
	t.Helper()
	b := make([]byte, 3)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return prefix + "-" + hex.EncodeToString(b)
}

// EnvOr is the environment variable key, or def when it is unset or empty.
func EnvOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

// Run runs a command and returns its standard output; an error carries the
// standard error.
func Run(ctx context.Context, name string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return string(out), fmt.Errorf("%s %s: %w: %s", filepath.Base(name), strings.Join(args, " "), err, stderr.String())
	}
	return string(out), nil
}

// NewNamespace creates a namespace for the test, labelled as the suites'
// own; when the test ends DeleteNamespace removes it with its volumes,
// waiting up to timeout for each step.
func NewNamespace(t *testing.T, client kubernetes.Interface, prefix string, timeout time.Duration) string {
	t.Helper()
	name := UniqueName(t, prefix)
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"diskplane.io/e2e": "true"}}}
	if _, err := client.CoreV1().Namespaces().Create(t.Context(), ns, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { DeleteNamespace(t, client, name, timeout) })
	return name
}

// DeleteNamespace deletes the namespace's StatefulSets and pods and waits
// until the pods are gone (their volumes unmounted), then deletes the
// claims and waits until the driver has deleted their volumes, so that no
// test leaves a volume attached; then it deletes the namespace.
func DeleteNamespace(t *testing.T, client kubernetes.Interface, ns string, timeout time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*timeout)
	defer cancel()
	grace := int64(1)
	core := client.CoreV1()
	if err := client.AppsV1().StatefulSets(ns).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
		t.Errorf("cleanup of %s: delete StatefulSets: %v", ns, err)
	}
	if err := core.Pods(ns).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: &grace}, metav1.ListOptions{}); err != nil {
		t.Errorf("cleanup of %s: delete pods: %v", ns, err)
	}
	err := poll.Until(ctx, timeout, func(ctx context.Context) (bool, string, error) {
		pods, err := core.Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, "", err
		}
		return len(pods.Items) == 0, fmt.Sprintf("%d pods left", len(pods.Items)), nil
	})
	if err != nil {
		t.Errorf("cleanup of %s: %v", ns, err)
	}
	claims, err := core.PersistentVolumeClaims(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Errorf("cleanup of %s: %v", ns, err)
		return
	}
	if err := core.PersistentVolumeClaims(ns).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
		t.Errorf("cleanup of %s: delete claims: %v", ns, err)
	}
	for _, c := range claims.Items {
		if c.Spec.VolumeName == "" {
			continue
		}
		err := poll.Until(ctx, timeout, func(ctx context.Context) (bool, string, error) {
			_, err := core.PersistentVolumes().Get(ctx, c.Spec.VolumeName, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				return true, "", nil
			}
			return false, "volume " + c.Spec.VolumeName + " still there", err
		})
		if err != nil {
			t.Errorf("cleanup of %s: %v", ns, err)
		}
	}
	if err := core.Namespaces().Delete(ctx, ns, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		t.Errorf("cleanup: delete namespace %s: %v", ns, err)
	}
}

// StorageClass makes a StorageClass of the driver with the parameters and
// binding mode, named after prefix, and deletes it when the test ends. Call
// it before NewNamespace, so that the class outlives the claims.
func StorageClass(t *testing.T, client kubernetes.Interface, prefix, driver string, params map[string]string,
	binding storagev1.VolumeBindingMode) string {
	t.Helper()
	sc := &storagev1.StorageClass{
		ObjectMeta:        metav1.ObjectMeta{Name: UniqueName(t, prefix)},
		Provisioner:       driver,
		Parameters:        params,
		VolumeBindingMode: &binding,
	}
	if _, err := client.StorageV1().StorageClasses().Create(t.Context(), sc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		err := client.StorageV1().StorageClasses().Delete(context.Background(), sc.Name, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("cleanup: delete StorageClass %s: %v", sc.Name, err)
		}
	})
	return sc.Name
}
