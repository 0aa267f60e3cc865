//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"

	"github.com/diskplane/diskplane/pkg/testutil"
)

// TestNodeEncryption applies examples/encryption and checks what the
// cluster owns of node-side LUKS: the claim is provisioned, its PV carries
// the node-stage and node-expand secret references the StorageClass's
// templates name (the claim's own Secret) and the volume context that asks
// the node to encrypt. On a kernel with dm-crypt the pod runs on the
// encrypted volume; on one without (this project's development machines)
// the pod shows the plugin's answer to NodeStageVolume, which says the
// kernel cannot open LUKS volumes — an answer the plugin gives only when the
// kubelet handed it the secret's passphrase: without one it answers that
// the secret is missing, as a second claim whose Secret lacks the key shows.
func TestNodeEncryption(t *testing.T) {
	t.Parallel()
	sc := newScenario(t)
	m := sc.example("encryption")
	noKey := m.get(t, "Secret").DeepCopy()
	noKey.SetName("no-key-claim-luks")
	noKey.Object["stringData"] = map[string]any{"passphrase": "under the wrong key"}
	noKeyClaim := m.get(t, "PersistentVolumeClaim").DeepCopy()
	noKeyClaim.SetName("no-key-claim")
	noKeyPod := m.get(t, "Pod").DeepCopy()
	noKeyPod.SetName("no-key-app")
	set(t, noKeyPod, []any{map[string]any{"name": "data", "persistentVolumeClaim": map[string]any{"claimName": "no-key-claim"}}}, "spec", "volumes")
	sc.create(append(m, noKey, noKeyClaim, noKeyPod)...)

	_, pv := sc.claimBound("encrypted-claim")
	for what, ref := range map[string]*corev1.SecretReference{"nodeStageSecretRef": pv.Spec.CSI.NodeStageSecretRef, "nodeExpandSecretRef": pv.Spec.CSI.NodeExpandSecretRef} {
		if ref == nil || ref.Name != "encrypted-claim-luks" || ref.Namespace != sc.ns {
			t.Errorf("PV %s has %s %+v, want the claim's Secret %s/encrypted-claim-luks", pv.Name, what, ref, sc.ns)
		}
	}
	if got := pv.Spec.CSI.VolumeAttributes["nodeEncryption"]; got != "luks2" {
		t.Errorf("PV %s volume context nodeEncryption = %q, want luks2", pv.Name, got)
	}

	if testutil.HasDeviceMapper() {
		sc.podReady("encrypted-app")
		if got := sc.exec("encrypted-app", "cat /data/log"); !strings.HasPrefix(got, "written at ") {
			t.Fatalf("the pod's log on the encrypted volume holds %q", got)
		}
	} else {
		sc.waitFor("the plugin's answer that this kernel cannot open LUKS", podTimeout, sc.podEventWith("encrypted-app", "FailedMount", "cannot open LUKS volumes", "device-mapper"))
	}
	sc.waitFor("the plugin's answer that the secret lacks the passphrase", podTimeout, sc.podEventWith("no-key-app", "FailedMount", `got no "luksPassphrase"`, "node-stage-secret-name"))
}

// podEventWith checks for an event of the scenario's pod with the reason
// whose message holds every one of parts.
func (sc *scenario) podEventWith(pod, reason string, parts ...string) func(context.Context) (bool, string, error) {
	return func(ctx context.Context) (bool, string, error) {
		sel := fields.Set{"involvedObject.kind": "Pod", "involvedObject.name": pod}.AsSelector().String()
		events, err := env.client.CoreV1().Events(sc.ns).List(ctx, metav1.ListOptions{FieldSelector: sel})
		if err != nil {
			return false, "", err
		}
		var seen []string
		for _, e := range events.Items {
			if e.Reason != reason {
				continue
			}
			all := true
			for _, part := range parts {
				all = all && strings.Contains(e.Message, part)
			}
			if all {
				return true, "", nil
			}
			seen = append(seen, e.Message)
		}
		return false, fmt.Sprintf("%s events so far: %q", reason, seen), nil
	}
}
