//go:build e2e_install

package install

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
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

// checkNodePolicy acts as the node plugin's ServiceAccount (RBAC lets it
// patch every Node) and asks for changes the ValidatingAdmissionPolicy
// diskplane-node-startup-taint must refuse: a label, and a taint added. An
// impersonated request carries no node name, so only the "nothing but the
// startup taint" rules apply, which is what these changes break.
func checkNodePolicy(t *testing.T) {
	t.Helper()
	cfg := rest.CopyConfig(env.config)
	cfg.Impersonate = rest.ImpersonationConfig{
		UserName: fmt.Sprintf("system:serviceaccount:%s:%s", env.namespace, nodeName),
		Groups:   []string{"system:serviceaccounts", "system:serviceaccounts:" + env.namespace, "system:authenticated"},
	}
	asPlugin, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	// The account may read its Node: RBAC works as the chart says.
	if _, err := asPlugin.CoreV1().Nodes().Get(t.Context(), env.node, metav1.GetOptions{}); err != nil {
		t.Fatalf("the node plugin's account cannot get node %s: %v", env.node, err)
	}
	before, err := env.client.CoreV1().Nodes().Get(t.Context(), env.node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	taints, err := json.Marshal(before.Spec.Taints)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, patch, undo string }{
		{"a label", `{"metadata":{"labels":{"diskplane-e2e/forbidden":"true"}}}`,
			`{"metadata":{"labels":{"diskplane-e2e/forbidden":null}}}`},
		{"a taint", `{"spec":{"taints":[{"key":"diskplane-e2e/forbidden","effect":"NoSchedule"}]}}`,
			`{"spec":{"taints":` + string(taints) + `}}`},
	} {
		_, err := asPlugin.CoreV1().Nodes().Patch(t.Context(), env.node, types.MergePatchType, []byte(tc.patch), metav1.PatchOptions{})
		if err == nil {
			t.Errorf("the node plugin's account could add %s to node %s; the admission policy should refuse", tc.name, env.node)
			if _, err := env.client.CoreV1().Nodes().Patch(t.Context(), env.node, types.MergePatchType, []byte(tc.undo), metav1.PatchOptions{}); err != nil {
				t.Errorf("undo %s on node %s: %v", tc.name, env.node, err)
			}
			continue
		}
		if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "diskplane-node-startup-taint") {
			t.Errorf("adding %s as the node plugin's account: %v, want Forbidden by ValidatingAdmissionPolicy diskplane-node-startup-taint", tc.name, err)
			continue
		}
		t.Logf("adding %s as the node plugin's account: refused: %v", tc.name, err)
	}
}
