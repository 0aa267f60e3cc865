//go:build e2e_install

package install

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The Windows node plugin's DaemonSet and the admission policy that keeps
// csi-proxy's pipes to it (hack/e2e/incluster.sh installs both; the cluster
// has no Windows node, and admission needs none).
const (
	windowsNodeName = "diskplane-node-windows"
	pipePolicy      = "diskplane-csi-proxy-pipes"
	// allowedAccount is the ServiceAccount the Helm install allows besides
	// the node plugin's (node.windows.pipeAdmissionPolicy.allowedServiceAccounts).
	allowedNamespace, allowedAccount = "default", "diskplane-e2e-pipes"
)

// checkPipePolicy asks the API server to admit pods (dry runs: nothing is
// created) that mount csi-proxy's pipes: the Windows DaemonSet's own pod is
// admitted, the same pod as another account is refused, and so is a pod
// that spells a pipe in other case and with forward slashes.
func checkPipePolicy(t *testing.T) {
	t.Helper()
	ctx := t.Context()
	ds, err := env.client.AppsV1().DaemonSets(env.namespace).Get(ctx, windowsNodeName, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the Windows node DaemonSet: %v", err)
	}
	if ds.Status.DesiredNumberScheduled != 0 {
		t.Errorf("the Windows node DaemonSet wants %d pods on a cluster without Windows nodes", ds.Status.DesiredNumberScheduled)
	}
	podOf := func(namespace, account string, spec corev1.PodSpec) *corev1.Pod {
		spec = *spec.DeepCopy()
		spec.ServiceAccountName = account
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{GenerateName: "diskplane-e2e-pipes-", Namespace: namespace}, Spec: spec}
	}
	admit := func(p *corev1.Pod) error {
		_, err := env.client.CoreV1().Pods(p.Namespace).Create(ctx, p, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err
	}
	template := ds.Spec.Template.Spec
	if err := admit(podOf(env.namespace, nodeName, template)); err != nil {
		t.Errorf("the Windows node plugin's own pod is refused: %v", err)
	}

	// A pod of another account in another namespace, with a pipe spelt
	// otherwise.
	other := template.DeepCopy()
	other.PriorityClassName = "" // system-node-critical is for kube-system
	for _, spelling := range []string{`\\.\pipe\csi-proxy-disk-v1`, `//./PIPE/CSI-PROXY-volume-v1`} {
		other.Volumes = []corev1.Volume{{Name: "pipe", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: spelling}}}}
		other.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "pipe", MountPath: spelling}}
		err := admit(podOf("default", "default", *other))
		if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), pipePolicy) {
			t.Errorf("a pod of default/default mounting %s: %v, want Forbidden by ValidatingAdmissionPolicy %s", spelling, err, pipePolicy)
		} else {
			t.Logf("a pod of default/default mounting %s: refused: %v", spelling, err)
		}
	}
	if env.method != byHelm {
		return
	}
	// The account the Helm install allows by value may.
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: allowedAccount, Namespace: allowedNamespace}}
	if _, err := env.client.CoreV1().ServiceAccounts(allowedNamespace).Create(ctx, sa, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	defer func() {
		if err := env.client.CoreV1().ServiceAccounts(allowedNamespace).Delete(ctx, allowedAccount, metav1.DeleteOptions{}); err != nil {
			t.Errorf("delete ServiceAccount %s/%s: %v", allowedNamespace, allowedAccount, err)
		}
	}()
	if err := admit(podOf(allowedNamespace, allowedAccount, *other)); err != nil {
		t.Errorf("a pod of %s/%s, allowed by node.windows.pipeAdmissionPolicy.allowedServiceAccounts, is refused: %v",
			allowedNamespace, allowedAccount, err)
	}
}
