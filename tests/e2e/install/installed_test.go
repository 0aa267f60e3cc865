//go:build e2e_install

package install

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"
)

// readyTimeout bounds the waits for the pods and the registration; an
// install the script waited for is ready at once.
const readyTimeout = 3 * time.Minute

// TestInstalled checks what the install must have achieved before any
// volume is used: the controller Deployment and the node DaemonSet are
// ready, the kubelet has registered the driver, the node plugin removed
// the startup taint <driver>/agent-not-ready:NoExecute the node was
// registered with (hack/e2e/incluster.sh brings the node up with it), the
// admission policy stops the node plugin's account from changing anything
// else on a Node, and the one for csi-proxy's pipes admits only the Windows
// node plugin's pods.
func TestInstalled(t *testing.T) {
	t.Run("pods ready", func(t *testing.T) {
		waitFor(t, "the controller Deployment and node DaemonSet ready", readyTimeout, rolledOut)
	})
	t.Run("plugin image pinned by the release", checkPinnedImage)
	t.Run("driver registered", func(t *testing.T) {
		waitFor(t, "CSINode "+env.node+" listing "+env.driverName, readyTimeout, func(ctx context.Context) (bool, string, error) {
			ok, err := driverRegistered(ctx)
			return ok, "not listed", err
		})
	})
	t.Run("startup taint removed by the node plugin", func(t *testing.T) {
		key := env.driverName + "/agent-not-ready"
		waitFor(t, "the startup taint gone from node "+env.node, readyTimeout, func(ctx context.Context) (bool, string, error) {
			n, err := env.client.CoreV1().Nodes().Get(ctx, env.node, metav1.GetOptions{})
			if err != nil {
				return false, "", err
			}
			for _, taint := range n.Spec.Taints {
				if taint.Key == key {
					return false, fmt.Sprintf("node %s still has %s:%s", n.Name, taint.Key, taint.Effect), nil
				}
			}
			return true, "", nil
		})
		// Gone, and gone because the plugin on this node removed it: its log
		// says so (the plugin only logs this line when it took a taint away).
		logs, err := kubectl(t.Context(), "logs", "-n", env.namespace, "-l", appSelector+",app.kubernetes.io/component=node",
			"-c", pluginContainer, "--tail=-1")
		if err != nil {
			t.Fatal(err)
		}
		var removal string
		for line := range strings.SplitSeq(logs, "\n") {
			if strings.Contains(line, `"Removed the startup taint"`) && strings.Contains(line, `node="`+env.node+`"`) {
				removal = line
			}
		}
		if removal == "" {
			t.Fatalf("the node plugin's log has no \"Removed the startup taint\" line for node %s: was the node registered with the taint %s:NoExecute?", env.node, key)
		}
		t.Logf("the node plugin: %s", removal)
	})
	t.Run("admission policy limits the node plugin", func(t *testing.T) {
		checkNodePolicy(t)
	})
	t.Run("admission policy keeps csi-proxy's pipes to the Windows node plugin", func(t *testing.T) {
		checkPipePolicy(t)
	})
}

// checkPinnedImage checks, when Diskplane was installed from a released
// chart (hack/e2e/incluster.sh's E2E_CHART), that every running pod of the
// controller and the node plugin runs the plugin as the image the release
// pinned, <repository>@<index digest>, and nothing else: the chart a user
// downloads starts the images released with it.
func checkPinnedImage(t *testing.T) {
	want := os.Getenv("E2E_PINNED_IMAGE")
	if want == "" {
		t.Skip("E2E_PINNED_IMAGE is unset: installed from the tree's chart, which pins no digest")
	}
	pods, err := env.client.CoreV1().Pods(env.namespace).List(t.Context(), metav1.ListOptions{LabelSelector: appSelector})
	if err != nil {
		t.Fatal(err)
	}
	plugins := 0
	for _, pod := range pods.Items {
		if pod.Status.Phase != corev1.PodRunning {
			continue
		}
		for _, c := range pod.Spec.Containers {
			if c.Name != pluginContainer {
				continue
			}
			plugins++
			if c.Image != want {
				t.Errorf("pod %s runs the plugin as %s, want the released %s", pod.Name, c.Image, want)
			}
		}
	}
	// The controller and the node plugin on the one node.
	if plugins < 2 {
		t.Fatalf("found %d running plugin containers in namespace %s, want the controller's and the node's", plugins, env.namespace)
	}
	t.Logf("%d plugin containers run %s", plugins, want)
}

// checkNodePolicy acts as the node plugin's ServiceAccount (RBAC lets it
// patch every Node) and asks for changes the ValidatingAdmissionPolicy
// diskplane-node-startup-taint must refuse, and for the one it must allow:
//   - impersonated, the request carries no node name, so the policy cannot
//     tell which Node is the plugin's own: even removing the startup taint
//     is refused;
//   - with a token bound to the node plugin's pod (which names the pod's
//     Node), a label, an owner reference or a finalizer added to another
//     Node (an object made for the test) or to its own Node, or a taint
//     added, is refused; then, with the startup taint put back for the test
//     (as NoSchedule, so that nothing is evicted), removing it together with
//     adding a label is refused, and removing it alone is allowed.
func checkNodePolicy(t *testing.T) {
	t.Helper()
	impersonated := rest.CopyConfig(env.config)
	impersonated.Impersonate = rest.ImpersonationConfig{
		UserName: fmt.Sprintf("system:serviceaccount:%s:%s", env.namespace, nodeName),
		Groups:   []string{"system:serviceaccounts", "system:serviceaccounts:" + env.namespace, "system:authenticated"},
	}
	asImpersonated, err := kubernetes.NewForConfig(impersonated)
	if err != nil {
		t.Fatal(err)
	}
	// The account may read its Node: RBAC works as the chart says.
	if _, err := asImpersonated.CoreV1().Nodes().Get(t.Context(), env.node, metav1.GetOptions{}); err != nil {
		t.Fatalf("the node plugin's account cannot get node %s: %v", env.node, err)
	}
	asPlugin := pluginClient(t)
	other := otherNode(t)
	owner := ownerReference(t)

	taintKey := env.driverName + "/agent-not-ready"
	label := `{"metadata":{"labels":{"diskplane-e2e/forbidden":"true"}}}`
	ownerRef := `{"metadata":{"ownerReferences":[` + owner + `]}}`
	finalizer := `{"metadata":{"finalizers":["diskplane-e2e/forbidden"]}}`
	type change struct {
		name   string
		client kubernetes.Interface
		node   string
		patch  string
	}
	refused := func(changes ...change) {
		for _, tc := range changes {
			err := patchNode(t, tc.client, tc.node, tc.patch, taintKey)
			if err == nil {
				t.Errorf("%s as the node plugin's account was admitted; the admission policy should refuse it", tc.name)
				restoreNode(t, tc.node)
				continue
			}
			if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "diskplane-node-startup-taint") {
				t.Errorf("%s as the node plugin's account: %v, want Forbidden by ValidatingAdmissionPolicy diskplane-node-startup-taint", tc.name, err)
				continue
			}
			t.Logf("%s as the node plugin's account: refused: %v", tc.name, err)
		}
	}
	// The node carries no startup taint now (the plugin removed it): the
	// taint rule holds, the others decide.
	refused(
		change{"impersonated: a label", asImpersonated, env.node, label},
		change{"another Node: a label", asPlugin, other, label},
		change{"another Node: an owner reference", asPlugin, other, ownerRef},
		change{"another Node: a finalizer", asPlugin, other, finalizer},
		change{"its own Node: a label", asPlugin, env.node, label},
		change{"its own Node: an owner reference", asPlugin, env.node, ownerRef},
		change{"its own Node: a finalizer", asPlugin, env.node, finalizer},
		change{"its own Node: a taint", asPlugin, env.node, `{"spec":{"taints":[{"key":"diskplane-e2e/forbidden","effect":"NoSchedule"}]}}`},
	)

	n, err := env.client.CoreV1().Nodes().Get(t.Context(), env.node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	kept, err := json.Marshal(n.Spec.Taints)
	if err != nil {
		t.Fatal(err)
	}
	n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: taintKey, Effect: corev1.TaintEffectNoSchedule})
	if _, err := env.client.CoreV1().Nodes().Update(t.Context(), n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { removeTaint(t, env.client, env.node, taintKey) })
	refused(
		change{"impersonated: remove the startup taint", asImpersonated, env.node, ""},
		change{"its own Node: remove the startup taint and add a label", asPlugin, env.node,
			`{"metadata":{"labels":{"diskplane-e2e/forbidden":"true"}},"spec":{"taints":` + string(kept) + `}}`},
	)
	if err := patchNode(t, asPlugin, env.node, "", taintKey); err != nil {
		t.Errorf("the node plugin's account could not remove the startup taint from its own node %s: %v", env.node, err)
	} else {
		t.Logf("removing the startup taint from its own node %s as the node plugin's account: admitted", env.node)
	}
}

// patchNode patches a Node as client: with patch (a merge patch), or, when
// patch is empty, by removing the taints with key as the node plugin does.
func patchNode(t *testing.T, client kubernetes.Interface, node, patch, key string) error {
	t.Helper()
	if patch != "" {
		_, err := client.CoreV1().Nodes().Patch(t.Context(), node, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
		return err
	}
	n, err := env.client.CoreV1().Nodes().Get(t.Context(), node, metav1.GetOptions{})
	if err != nil {
		return err
	}
	kept := []corev1.Taint{}
	for _, taint := range n.Spec.Taints {
		if taint.Key != key {
			kept = append(kept, taint)
		}
	}
	b, err := json.Marshal(map[string]any{"spec": map[string]any{"taints": kept}})
	if err != nil {
		return err
	}
	_, err = client.CoreV1().Nodes().Patch(t.Context(), node, types.StrategicMergePatchType, b, metav1.PatchOptions{})
	return err
}

// restoreNode takes back what a wrongly admitted patch added to a Node (also
// from a cleanup, when the test's context has ended).
func restoreNode(t *testing.T, node string) {
	t.Helper()
	err := updateNode(env.client, node, func(n *corev1.Node) bool {
		delete(n.Labels, "diskplane-e2e/forbidden")
		n.OwnerReferences, n.Finalizers = nil, nil
		n.Spec.Taints = withoutTaint(n.Spec.Taints, "diskplane-e2e/forbidden")
		return true
	})
	if err != nil {
		t.Errorf("restore node %s: %v", node, err)
	}
}

// removeTaint removes the taints with key from a Node as the admin (from a
// cleanup too).
func removeTaint(t *testing.T, client kubernetes.Interface, node, key string) {
	err := updateNode(client, node, func(n *corev1.Node) bool {
		kept := withoutTaint(n.Spec.Taints, key)
		changed := len(kept) != len(n.Spec.Taints)
		n.Spec.Taints = kept
		return changed
	})
	if err != nil {
		t.Errorf("remove taint %s from node %s: %v", key, node, err)
	}
}

// updateNode reads a Node, lets change edit it (false: nothing to write) and
// writes it back, again from a fresh read when the write conflicts: the
// cluster's node lifecycle controller updates Nodes too (a CI run lost a
// restore to its write in between).
func updateNode(client kubernetes.Interface, node string, change func(*corev1.Node) bool) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n, err := client.CoreV1().Nodes().Get(context.Background(), node, metav1.GetOptions{})
		if err != nil || !change(n) {
			return err
		}
		_, err = client.CoreV1().Nodes().Update(context.Background(), n, metav1.UpdateOptions{})
		return err
	})
}

// withoutTaint returns taints without those with key.
func withoutTaint(taints []corev1.Taint, key string) []corev1.Taint {
	var kept []corev1.Taint
	for _, taint := range taints {
		if taint.Key != key {
			kept = append(kept, taint)
		}
	}
	return kept
}

// pluginClient is a client with what the node plugin's pod has: a token of
// its ServiceAccount bound to the pod, which names the pod's Node.
func pluginClient(t *testing.T) kubernetes.Interface {
	t.Helper()
	pods, err := env.client.CoreV1().Pods(env.namespace).List(t.Context(), metav1.ListOptions{
		LabelSelector: appSelector + ",app.kubernetes.io/component=node", FieldSelector: "spec.nodeName=" + env.node,
	})
	if err != nil || len(pods.Items) == 0 {
		t.Fatalf("the node plugin's pod on %s: %v (%d pods)", env.node, err, len(pods.Items))
	}
	pod := pods.Items[0]
	expires := int64(600)
	tok, err := env.client.CoreV1().ServiceAccounts(env.namespace).CreateToken(t.Context(), pod.Spec.ServiceAccountName, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{
			ExpirationSeconds: &expires,
			BoundObjectRef:    &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("a token of %s bound to pod %s: %v", pod.Spec.ServiceAccountName, pod.Name, err)
	}
	cfg := rest.AnonymousClientConfig(env.config)
	cfg.BearerToken = tok.Status.Token
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return client
}

// otherNode makes a Node object no kubelet runs (without the OS label, so
// no DaemonSet places a pod on it) and deletes it when the test ends.
func otherNode(t *testing.T) string {
	t.Helper()
	n, err := env.client.CoreV1().Nodes().Create(t.Context(), &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "diskplane-e2e-other-node"},
		Spec:       corev1.NodeSpec{Taints: []corev1.Taint{{Key: "diskplane-e2e/not-a-node", Effect: corev1.TaintEffectNoSchedule}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		restoreNode(t, n.Name)
		if err := env.client.CoreV1().Nodes().Delete(context.Background(), n.Name, metav1.DeleteOptions{}); err != nil {
			t.Errorf("delete node %s: %v", n.Name, err)
		}
	})
	return n.Name
}

// ownerReference is an owner reference to an object that exists (the
// default namespace), as JSON.
func ownerReference(t *testing.T) string {
	t.Helper()
	ns, err := env.client.CoreV1().Namespaces().Get(t.Context(), "default", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf(`{"apiVersion":"v1","kind":"Namespace","name":"default","uid":%q}`, ns.UID)
}
