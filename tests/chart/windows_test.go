package chart

import (
	"slices"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
)

// pipes are csi-proxy's named pipes of the API groups the Windows node
// plugin uses.
var pipes = []string{`\\.\pipe\csi-proxy-disk-v1`, `\\.\pipe\csi-proxy-filesystem-v1`, `\\.\pipe\csi-proxy-volume-v1`, `\\.\pipe\csi-proxy-volume-v2alpha1`}

func (m *manifest) windowsNode() *appsv1.DaemonSet {
	m.t.Helper()
	return decode[appsv1.DaemonSet](m, m.get("DaemonSet", "diskplane-node-windows"))
}

// hostPaths lists the hostPath volumes of a pod as name: path.
func hostPaths(spec corev1.PodSpec) map[string]string {
	out := map[string]string{}
	for _, v := range spec.Volumes {
		if v.HostPath != nil {
			out[v.Name] = v.HostPath.Path
		}
	}
	return out
}

func TestWindowsOffByDefault(t *testing.T) {
	m := render(t, "")
	for _, name := range []string{"DaemonSet/diskplane-node-windows", "ValidatingAdmissionPolicy/diskplane-csi-proxy-pipes"} {
		if slices.Contains(m.names(), name) {
			t.Errorf("%s is rendered by default", name)
		}
	}
	if m := render(t, "node: {windows: {pipeAdmissionPolicy: {enabled: true}}}\n"); m.find("ValidatingAdmissionPolicy", "diskplane-csi-proxy-pipes") != nil {
		t.Error("the pipe policy is rendered without the Windows DaemonSet")
	}
}

// TestWindowsCSIProxy renders the csi-proxy flavour: a Windows container
// with csi-proxy's three pipes mounted, its sockets in hostPath directories
// the kubelet reaches, on Windows nodes only.
func TestWindowsCSIProxy(t *testing.T) {
	m := render(t, "node: {windows: {enabled: true}, imdsEndpoint: \"http://$(HOST_IP):8701\", volumeAttachLimit: 20}\n")
	ds := m.windowsNode()
	spec := ds.Spec.Template.Spec
	if spec.NodeSelector["kubernetes.io/os"] != "windows" || spec.ServiceAccountName != "diskplane-node" || spec.HostNetwork {
		t.Errorf("pod: nodeSelector %v, ServiceAccount %s, hostNetwork %v", spec.NodeSelector, spec.ServiceAccountName, spec.HostNetwork)
	}
	if m.node().Spec.Template.Spec.NodeSelector["kubernetes.io/os"] != "linux" {
		t.Error("the Linux node DaemonSet left Linux nodes")
	}
	c := container(spec, "diskplane")
	if c.Image != pluginImage+"-windows:v0.1.0-ltsc2022" {
		t.Errorf("image %s", c.Image)
	}
	for _, arg := range []string{"--mode=node", "--endpoint=unix://C:/csi/csi.sock", "--plugin-registration-dir=C:\\registration",
		`--kubelet-registration-path=C:\var\lib\kubelet\plugins\ebs.csi.diskplane.io\csi.sock`, "--csi-proxy-wait=30s",
		"--driver-name=ebs.csi.diskplane.io", "--volume-attach-limit=20",
		`--windows-state-dir=C:\var\lib\kubelet\plugins\ebs.csi.diskplane.io`} {
		if !hasArg(c.Args, arg) {
			t.Errorf("plugin args %q lack %s", c.Args, arg)
		}
	}
	if hasArg(c.Args, "--windows-host-process") {
		t.Error("csi-proxy mode runs the library")
	}
	if e := env(c, "AWS_EC2_METADATA_SERVICE_ENDPOINT"); e == nil || e.Value != "http://$(HOST_IP):8701" {
		t.Errorf("IMDS endpoint %+v", e)
	}
	if c.SecurityContext == nil || c.SecurityContext.WindowsOptions == nil || *c.SecurityContext.WindowsOptions.RunAsUserName != "ContainerAdministrator" {
		t.Errorf("security context %+v", c.SecurityContext)
	}
	paths := hostPaths(spec)
	mounts := map[string]string{}
	for _, vm := range c.VolumeMounts {
		mounts[vm.Name] = vm.MountPath
	}
	for _, pipe := range pipes {
		name := strings.TrimPrefix(pipe, `\\.\pipe\`)
		if paths[name] != pipe || mounts[name] != pipe {
			t.Errorf("pipe %s: hostPath %q mounted at %q", pipe, paths[name], mounts[name])
		}
	}
	if paths["plugin-dir"] != `C:\var\lib\kubelet\plugins\ebs.csi.diskplane.io` || mounts["plugin-dir"] != `C:\csi` ||
		paths["registration-dir"] != `C:\var\lib\kubelet\plugins_registry` || mounts["registration-dir"] != `C:\registration` {
		t.Errorf("socket directories: hostPaths %v mounted at %v", paths, mounts)
	}

	// Its policy is there, allowing the node plugin's account only.
	vap := decode[admissionv1.ValidatingAdmissionPolicy](m, m.get("ValidatingAdmissionPolicy", "diskplane-csi-proxy-pipes"))
	if got := vap.Spec.Validations[0].Expression; !strings.HasSuffix(got, "in ['kube-system/diskplane-node']") {
		t.Errorf("policy expression %q", got)
	}
	if *vap.Spec.FailurePolicy != admissionv1.Fail || vap.Spec.MatchConstraints.ResourceRules[0].Resources[0] != "pods" {
		t.Errorf("policy %+v", vap.Spec)
	}
	if got := vap.Spec.MatchConditions[1].Expression; got != "!(request.namespace in ['kube-system'])" {
		t.Errorf("trusted namespaces %q", got)
	}
	volumes := decode[admissionv1.ValidatingAdmissionPolicy](m, m.get("ValidatingAdmissionPolicy", "diskplane-csi-proxy-pipe-volumes"))
	if r := volumes.Spec.MatchConstraints.ResourceRules[0]; r.Resources[0] != "persistentvolumes" || !slices.Equal(r.Operations,
		[]admissionv1.OperationType{admissionv1.Create, admissionv1.Update}) {
		t.Errorf("volume policy rule %+v", r)
	}
	// Both policies test paths with the same expression.
	if pods, pvs := vap.Spec.Variables[0].Expression, volumes.Spec.Variables[0].Expression; !strings.Contains(pvs, pods[strings.Index(pods, ".filter(p,"):]) {
		t.Errorf("the policies test pipes differently:\n%s\n%s", pods, pvs)
	}
	for _, policy := range []string{vap.Name, volumes.Name} {
		binding := decode[admissionv1.ValidatingAdmissionPolicyBinding](m, m.get("ValidatingAdmissionPolicyBinding", policy))
		if binding.Spec.PolicyName != policy || !slices.Equal(binding.Spec.ValidationActions, []admissionv1.ValidationAction{admissionv1.Deny}) {
			t.Errorf("binding %+v", binding.Spec)
		}
	}
}

// TestWindowsHostProcess renders the HostProcess flavour: the library in
// the plugin, on the host as SYSTEM, no pipes.
func TestWindowsHostProcess(t *testing.T) {
	m := render(t, `
node:
  windows:
    enabled: true
    mode: hostProcess
    kubeletDir: 'D:\k8s\kubelet\'
    pipeAdmissionPolicy:
      allowedServiceAccounts: [other-csi/node, kube-system/csi-smb-node]
      allowedNamespaces: []
      validationActions: [Warn, Audit]
`)
	spec := m.windowsNode().Spec.Template.Spec
	sc := spec.SecurityContext
	if !spec.HostNetwork || sc == nil || sc.WindowsOptions == nil || !*sc.WindowsOptions.HostProcess || *sc.WindowsOptions.RunAsUserName != `NT AUTHORITY\SYSTEM` {
		t.Errorf("hostNetwork %v, security context %+v", spec.HostNetwork, sc)
	}
	c := container(spec, "diskplane")
	if c.Image != pluginImage+"-windows:v0.1.0-hostprocess" {
		t.Errorf("image %s", c.Image)
	}
	for _, arg := range []string{"--windows-host-process", "--endpoint=unix://D:/k8s/kubelet/plugins/ebs.csi.diskplane.io/csi.sock",
		`--kubelet-registration-path=D:\k8s\kubelet\plugins\ebs.csi.diskplane.io\csi.sock`, `--plugin-registration-dir=D:\k8s\kubelet\plugins_registry`} {
		if !hasArg(c.Args, arg) {
			t.Errorf("plugin args %q lack %s", c.Args, arg)
		}
	}
	if _, ok := argWithPrefix(c.Args, "--csi-proxy-wait"); ok {
		t.Error("HostProcess mode waits for a csi-proxy")
	}
	if len(spec.Volumes) != 0 || len(c.VolumeMounts) != 0 {
		t.Errorf("a HostProcess pod mounts %v at %v", spec.Volumes, c.VolumeMounts)
	}
	vap := decode[admissionv1.ValidatingAdmissionPolicy](m, m.get("ValidatingAdmissionPolicy", "diskplane-csi-proxy-pipes"))
	if got := vap.Spec.Validations[0].Expression; !strings.HasSuffix(got, "in ['kube-system/diskplane-node','other-csi/node','kube-system/csi-smb-node']") {
		t.Errorf("policy expression %q", got)
	}
	if got := vap.Spec.MatchConditions[1].Expression; got != "!(request.namespace in [])" {
		t.Errorf("trusted namespaces %q", got)
	}
	binding := decode[admissionv1.ValidatingAdmissionPolicyBinding](m, m.get("ValidatingAdmissionPolicyBinding", "diskplane-csi-proxy-pipe-volumes"))
	if !slices.Equal(binding.Spec.ValidationActions, []admissionv1.ValidationAction{admissionv1.Warn, admissionv1.Audit}) {
		t.Errorf("binding %+v", binding.Spec)
	}
	if m := render(t, "node: {windows: {enabled: true, pipeAdmissionPolicy: {enabled: false}}}\n"); m.find("ValidatingAdmissionPolicy", "diskplane-csi-proxy-pipes") != nil {
		t.Error("the pipe policy is rendered although turned off")
	}
}

func TestWindowsSchema(t *testing.T) {
	for name, values := range map[string]string{
		"unknown mode":                "node: {windows: {mode: hostprocess}}\n",
		"Linux kubelet dir":           "node: {windows: {kubeletDir: /var/lib/kubelet}}\n",
		"account without a namespace": "node: {windows: {pipeAdmissionPolicy: {allowedServiceAccounts: [node]}}}\n",
		"namespace with a slash":      "node: {windows: {pipeAdmissionPolicy: {allowedNamespaces: [a/b]}}}\n",
		"deny and warn":               "node: {windows: {pipeAdmissionPolicy: {validationActions: [Deny, Warn]}}}\n",
		"no action":                   "node: {windows: {pipeAdmissionPolicy: {validationActions: []}}}\n",
		"typo":                        "node: {windows: {enable: true}}\n",
	} {
		t.Run(name, func(t *testing.T) {
			if out := renderError(t, values); !strings.Contains(out, "schema") {
				t.Errorf("not refused by the schema:\n%s", out)
			}
		})
	}
}

// The notes name the Windows DaemonSet and what Windows pods need, only
// when it is installed.
func TestWindowsNotes(t *testing.T) {
	for _, tc := range []struct {
		set  []string
		want []string
		not  []string
	}{
		{not: []string{"diskplane-node-windows", "fstype: ntfs"}},
		{set: []string{"--set", "node.windows.enabled=true"},
			want: []string{"rollout status daemonset/diskplane-node-windows", "fstype: ntfs", "csi-proxy v1.1.3",
				"refused outside the namespaces\n   kube-system unless"}},
		{set: []string{"--set", "node.windows.enabled=true", "--set", "node.windows.pipeAdmissionPolicy.enabled=false"},
			not: []string{"csi-proxy's pipes are refused"}},
		{set: []string{"--set", "node.windows.enabled=true", "--set", "node.windows.mode=hostProcess"},
			want: []string{"rollout status daemonset/diskplane-node-windows", "fstype: ntfs"}, not: []string{"csi-proxy v1.1.3"}},
	} {
		args := append([]string{"install", releaseName, chartDir, "--namespace", namespace, "--dry-run=client"}, tc.set...)
		stdout, stderr, err := runHelm(t, args...)
		if err != nil {
			t.Fatalf("helm install --dry-run %v: %v\n%s", tc.set, err, stderr)
		}
		_, notes, ok := strings.Cut(stdout, "NOTES:")
		if !ok {
			t.Fatalf("%v: no NOTES:\n%s", tc.set, stdout)
		}
		for _, want := range tc.want {
			if !strings.Contains(notes, want) {
				t.Errorf("%v: NOTES lack %q", tc.set, want)
			}
		}
		for _, not := range tc.not {
			if strings.Contains(notes, not) {
				t.Errorf("%v: NOTES say %q", tc.set, not)
			}
		}
	}
}

// TestWindowsPreStop: the Windows DaemonSet has the node plugin's preStop
// hook in both flavours, with the image's binary, and none when it is off.
func TestWindowsPreStop(t *testing.T) {
	for _, tc := range []struct {
		values string
		want   []string
	}{
		{"node: {windows: {enabled: true, logLevel: 4}}\n",
			[]string{`C:\diskplane.exe`, "pre-stop", "--driver-name=ebs.csi.diskplane.io", "--v=4"}},
		{"node: {windows: {enabled: true, mode: hostProcess}}\n",
			[]string{"diskplane.exe", "pre-stop", "--driver-name=ebs.csi.diskplane.io", "--v=2"}},
		{"node: {preStopHook: {enabled: false}, windows: {enabled: true}}\n", nil},
	} {
		c := container(render(t, tc.values).windowsNode().Spec.Template.Spec, "diskplane")
		var got []string
		if l := c.Lifecycle; l != nil && l.PreStop != nil && l.PreStop.Exec != nil {
			got = l.PreStop.Exec.Command
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("%s: preStop %q, want %q", strings.TrimSpace(tc.values), got, tc.want)
		}
	}
}
