//go:build e2e_install

package install

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The Windows node plugin's DaemonSet and the admission policy that keeps
// csi-proxy's pipes to it (hack/e2e/incluster.sh installs both; the cluster
// has no Windows node, and admission needs none).
const (
	windowsNodeName  = "diskplane-node-windows"
	pipePolicy       = "diskplane-csi-proxy-pipes"
	pipeVolumePolicy = "diskplane-csi-proxy-pipe-volumes"
	// allowedAccount is the ServiceAccount the Helm install allows besides
	// the node plugin's (node.windows.pipeAdmissionPolicy.allowedServiceAccounts).
	allowedNamespace, allowedAccount = "default", "diskplane-e2e-pipes"
)

// pipeSpellings are host paths a pod may give a hostPath volume, each with
// whether the pipe policy must refuse it. Windows resolves ".", ".." and
// repeated separators in \\.\ paths, not in \\?\ ones, reaches pipes
// by UNC and NT names too, and compares pipe names regardless of case (its
// own case table, not only ASCII): every spelling that is, or may resolve
// to, a csi-proxy pipe is refused; other pipes and ordinary paths are not.
var pipeSpellings = []struct {
	path   string
	refuse bool
}{
	{`\\.\pipe\csi-proxy-disk-v1`, true},
	{`//./PIPE/CSI-PROXY-volume-v1`, true},
	{`\\.\pipe\\csi-proxy-disk-v1`, true},
	{`\\.\pipe\.\csi-proxy-disk-v1`, true},
	{`\\.\pipe\x\..\csi-proxy-disk-v1`, true},
	{`\\.\x\..\pipe\csi-proxy-filesystem-v1`, true},
	{`\\?\pipe\csi-proxy-disk-v1`, true},
	{`\\?\PIPE\Csi-Proxy-Volume-V1`, true},
	{`\\localhost\pipe\csi-proxy-disk-v1`, true},
	{`\\127.0.0.1\pipe\csi-proxy-disk-v1`, true},
	{`\\.\GLOBALROOT\Device\NamedPipe\csi-proxy-disk-v1`, true},
	{`\??\pipe\csi-proxy-disk-v1`, true},
	{` \\.\pipe\csi-proxy-disk-v1 `, true},
	{`\\.\pipe\csi-proxy-disk-v1.`, true},
	{`\\.\pipe\`, true},                  // every pipe of the node
	{`\\.\pipe`, true},                   // the same
	{`\\.\x\..\pipe\`, true},             // the same, spelt around
	{`\\.\pipe\cſi-proxy-disk-v1`, true}, // long s: Windows' case table may fold it to S
	{`\\.\pipe\csi-pr?xy-disk-v1`, true}, // a wildcard: doubt
	{`\\.\pipe\docker_engine`, false},    // another pipe
	{`//./pipe/containerd-containerd`, false},
	{`C:\var\log`, false},
	{`/var/lib/kubelet`, false},
}

// checkPipePolicy asks the API server to admit pods and PersistentVolumes
// (dry runs: nothing is created) that reach csi-proxy's pipes: the Windows
// DaemonSet's own pod is admitted; a pod of another account is refused for
// every spelling of a pipe, unless in kube-system (trusted by default);
// PersistentVolumes whose path is a pipe are refused.
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

	// A pod of another account, with a host path spelt each way.
	other := template.DeepCopy()
	other.PriorityClassName = "" // system-node-critical is for kube-system
	withPath := func(path string) corev1.PodSpec {
		spec := *other.DeepCopy()
		spec.Volumes = []corev1.Volume{{Name: "pipe", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: path}}}}
		spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "pipe", MountPath: `C:\pipe`}}
		return spec
	}
	refused := 0
	for _, tc := range pipeSpellings {
		err := admit(podOf("default", "default", withPath(tc.path)))
		switch {
		case tc.refuse && (!apierrors.IsForbidden(err) || !strings.Contains(err.Error(), pipePolicy)):
			t.Errorf("a pod of default/default with hostPath %q: %v, want Forbidden by ValidatingAdmissionPolicy %s", tc.path, err, pipePolicy)
		case !tc.refuse && err != nil:
			t.Errorf("a pod of default/default with hostPath %q is refused: %v", tc.path, err)
		case tc.refuse:
			refused++
		}
		if tc.refuse {
			// The namespace other drivers' node plugins run in is trusted.
			if err := admit(podOf("kube-system", "default", withPath(tc.path))); err != nil {
				t.Errorf("a pod of kube-system/default with hostPath %q is refused: %v", tc.path, err)
			}
		}
	}
	t.Logf("%d spellings of csi-proxy's pipes refused, %d other paths admitted", refused, len(pipeSpellings)-refused)
	checkPipeVolumes(t)

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
	if err := admit(podOf(allowedNamespace, allowedAccount, withPath(pipeSpellings[0].path))); err != nil {
		t.Errorf("a pod of %s/%s, allowed by node.windows.pipeAdmissionPolicy.allowedServiceAccounts, is refused: %v",
			allowedNamespace, allowedAccount, err)
	}
}

// checkPipeVolumes asks the API server to admit PersistentVolumes (dry
// runs) whose hostPath or local path is a spelling of a csi-proxy pipe: a
// claim would hand the pipe to its pod, so they are refused; other paths
// are not.
func checkPipeVolumes(t *testing.T) {
	t.Helper()
	pv := func(source corev1.PersistentVolumeSource) error {
		v := &corev1.PersistentVolume{
			ObjectMeta: metav1.ObjectMeta{GenerateName: "diskplane-e2e-pipes-"},
			Spec: corev1.PersistentVolumeSpec{
				Capacity:               corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
				AccessModes:            []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
				PersistentVolumeSource: source,
			},
		}
		if source.Local != nil {
			v.Spec.NodeAffinity = &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
				MatchExpressions: []corev1.NodeSelectorRequirement{{Key: corev1.LabelOSStable, Operator: corev1.NodeSelectorOpIn, Values: []string{"windows"}}},
			}}}}
		}
		_, err := env.client.CoreV1().PersistentVolumes().Create(t.Context(), v, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err
	}
	for _, tc := range []struct {
		name   string
		source corev1.PersistentVolumeSource
		refuse bool
	}{
		{"hostPath pipe", corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: `\\.\pipe\csi-proxy-disk-v1`}}, true},
		{"hostPath pipe spelt otherwise", corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: `\\?\PIPE\csi-proxy-volume-v1`}}, true},
		{"local pipe", corev1.PersistentVolumeSource{Local: &corev1.LocalVolumeSource{Path: `//./pipe/./csi-proxy-filesystem-v1`}}, true},
		{"hostPath directory", corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: `C:\data`}}, false},
		{"local disk", corev1.PersistentVolumeSource{Local: &corev1.LocalVolumeSource{Path: "/mnt/disks/ssd0"}}, false},
	} {
		err := pv(tc.source)
		switch {
		case tc.refuse && (!apierrors.IsForbidden(err) || !strings.Contains(err.Error(), pipeVolumePolicy)):
			t.Errorf("a PersistentVolume with a %s: %v, want Forbidden by ValidatingAdmissionPolicy %s", tc.name, err, pipeVolumePolicy)
		case !tc.refuse && err != nil:
			t.Errorf("a PersistentVolume with a %s is refused: %v", tc.name, err)
		}
	}
}
