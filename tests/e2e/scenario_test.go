//go:build e2e

package e2e

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/diskplane/diskplane/tests/e2e/poll"
)

// scenario is one test's world: a namespace of its own, a suffix that makes
// the names of its cluster-wide objects (classes) unique, and a cleanup that
// removes all of it in the order Kubernetes needs (pods, then snapshots,
// then claims, then waits until their volumes are gone from EC2), whether
// the test passed or not.
type scenario struct {
	t      *testing.T
	ns     string
	suffix string
	// clusterScoped holds the classes this scenario created, deleted last.
	clusterScoped []*unstructured.Unstructured
}

// cleanupTimeout bounds each step of a scenario's cleanup.
const cleanupTimeout = 3 * time.Minute

var unsafeName = regexp.MustCompile(`[^a-z0-9-]+`)

// newScenario creates a namespace named after the test and registers the
// scenario's cleanup.
func newScenario(t *testing.T) *scenario {
	t.Helper()
	b := make([]byte, 3)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	suffix := hex.EncodeToString(b)
	base := strings.Trim(unsafeName.ReplaceAllString(strings.ToLower(t.Name()), "-"), "-")
	if len(base) > 40 {
		base = strings.Trim(base[:40], "-")
	}
	sc := &scenario{t: t, ns: "e2e-" + base + "-" + suffix, suffix: suffix}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: sc.ns, Labels: map[string]string{"diskplane.io/e2e": "true"}}}
	if _, err := env.client.CoreV1().Namespaces().Create(t.Context(), ns, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create namespace %s: %v", sc.ns, err)
	}
	t.Logf("namespace %s", sc.ns)
	t.Cleanup(sc.cleanup)
	return sc
}

// create creates the objects in order; cluster-scoped ones are deleted when
// the scenario ends.
func (sc *scenario) create(objs ...*unstructured.Unstructured) {
	sc.t.Helper()
	for _, o := range objs {
		res, namespaced := resourceOf(sc.t, o)
		var err error
		if namespaced {
			_, err = env.dynamic.Resource(res).Namespace(sc.ns).Create(sc.t.Context(), o, metav1.CreateOptions{})
		} else {
			_, err = env.dynamic.Resource(res).Create(sc.t.Context(), o, metav1.CreateOptions{})
			if err == nil {
				sc.clusterScoped = append(sc.clusterScoped, o)
			}
		}
		if err != nil {
			sc.t.Fatalf("create %s %s: %v", o.GetKind(), o.GetName(), err)
		}
	}
}

// cleanup removes everything the scenario made and waits until the claims'
// EC2 volumes are deleted, so that a test's end means its volumes are gone.
func (sc *scenario) cleanup() {
	t := sc.t
	ctx, cancel := context.WithTimeout(context.Background(), 4*cleanupTimeout)
	defer cancel()
	if t.Failed() {
		sc.diagnose(ctx)
	}
	for _, step := range []struct {
		res  gvr
		what string
	}{{podsResource, "pods"}, {snapshotsResource, "volume snapshots"}, {claimsResource, "claims"}} {
		if err := deleteAllAndWait(ctx, step.res, sc.ns); err != nil {
			t.Errorf("cleanup of %s: %s: %v", sc.ns, step.what, err)
		}
	}
	err := poll.Until(ctx, cleanupTimeout, func(ctx context.Context) (bool, string, error) {
		vols, err := env.emulator.volumesTagged(ctx, "kubernetes.io/created-for/pvc/namespace", sc.ns)
		if err != nil || len(vols) == 0 {
			return err == nil, "", err
		}
		return false, fmt.Sprintf("%d EC2 volumes of %s remain, e.g. %s (%s)", len(vols), sc.ns, vols[0].ID, vols[0].State), nil
	})
	if err != nil {
		t.Errorf("cleanup of %s: the claims' EC2 volumes are not deleted: %v", sc.ns, err)
	}
	if err := env.client.CoreV1().Namespaces().Delete(ctx, sc.ns, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		t.Errorf("delete namespace %s: %v", sc.ns, err)
	}
	for _, o := range slices.Backward(sc.clusterScoped) {
		res, _ := resourceOf(t, o)
		err := env.dynamic.Resource(res).Delete(ctx, o.GetName(), metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("delete %s %s: %v", o.GetKind(), o.GetName(), err)
		}
	}
}

// diagnose logs what a failed test leaves to look at: the namespace's
// objects and events, and the end of the driver's log.
func (sc *scenario) diagnose(ctx context.Context) {
	t := sc.t
	for _, args := range [][]string{
		{"get", "pod,pvc,volumesnapshot,volumesnapshotcontent", "-n", sc.ns, "-o", "wide"},
		{"get", "pv,volumeattachment", "-o", "wide"},
		{"get", "events", "-n", sc.ns, "--sort-by=.lastTimestamp"},
		{"describe", "pvc", "-n", sc.ns},
	} {
		out, err := kubectl(ctx, args...)
		t.Logf("kubectl %s:\n%s%v", strings.Join(args, " "), out, errOrEmpty(err))
	}
	t.Logf("the end of the driver's log (%s):\n%s", env.driver, env.driver.logTail(ctx, 40))
}

func errOrEmpty(err error) string {
	if err == nil {
		return ""
	}
	return "error: " + err.Error()
}

// deleteAllAndWait deletes every object of a namespaced resource in ns and
// waits until they are gone (finalizers included).
func deleteAllAndWait(ctx context.Context, res gvr, ns string) error {
	client := env.dynamic.Resource(res).Namespace(ns)
	grace := int64(1)
	if err := client.DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: &grace}, metav1.ListOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	return poll.Until(ctx, cleanupTimeout, func(ctx context.Context) (bool, string, error) {
		list, err := client.List(ctx, metav1.ListOptions{})
		if err != nil || len(list.Items) == 0 {
			return err == nil, "", err
		}
		return false, fmt.Sprintf("%d left, e.g. %s", len(list.Items), list.Items[0].GetName()), nil
	})
}

// kubectl runs the cluster's kubectl and returns its standard output; an
// error carries the standard error.
func kubectl(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, env.kubectl, append([]string{"--kubeconfig", env.kubeconfig}, args...)...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return string(out), fmt.Errorf("kubectl %s: %w: %s", strings.Join(args, " "), err, stderr.String())
	}
	return string(out), nil
}

// exec runs a shell command in a pod's first container and returns its
// standard output.
func (sc *scenario) exec(pod, command string) string {
	sc.t.Helper()
	ctx, cancel := context.WithTimeout(sc.t.Context(), time.Minute)
	defer cancel()
	out, err := kubectl(ctx, "exec", "-n", sc.ns, pod, "--", "sh", "-c", command)
	if err != nil {
		sc.t.Fatalf("exec in %s: %v", pod, err)
	}
	return out
}

// waitFor polls like poll and fails the test on timeout.
func (sc *scenario) waitFor(what string, timeout time.Duration, check func(context.Context) (bool, string, error)) {
	sc.t.Helper()
	start := time.Now()
	if err := poll.Until(sc.t.Context(), timeout, check); err != nil {
		sc.t.Fatalf("waiting for %s: %v", what, err)
	}
	sc.t.Logf("%s after %s", what, time.Since(start).Round(100*time.Millisecond))
}
