package chart

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/klog/v2"
)

// The sidecar images every user gets: pinned, and listed in docs/install.md.
var defaultSidecarImages = map[string]string{
	"csi-provisioner": "registry.k8s.io/sig-storage/csi-provisioner:v6.3.0",
	"csi-attacher":    "registry.k8s.io/sig-storage/csi-attacher:v4.13.0",
	"csi-resizer":     "registry.k8s.io/sig-storage/csi-resizer:v2.3.0",
	"csi-snapshotter": "registry.k8s.io/sig-storage/csi-snapshotter:v8.7.0",
}

func TestDefaultObjects(t *testing.T) {
	m := render(t, "")
	want := []string{
		"ServiceAccount/diskplane-controller", "ServiceAccount/diskplane-node",
		"ClusterRole/diskplane-provisioner", "ClusterRole/diskplane-attacher", "ClusterRole/diskplane-resizer",
		"ClusterRole/diskplane-snapshotter", "ClusterRole/diskplane-node", "ClusterRole/diskplane-node-witness",
		"ClusterRoleBinding/diskplane-provisioner", "ClusterRoleBinding/diskplane-attacher",
		"ClusterRoleBinding/diskplane-resizer", "ClusterRoleBinding/diskplane-snapshotter", "ClusterRoleBinding/diskplane-node",
		"ClusterRoleBinding/diskplane-node-witness",
		"Role/diskplane-leader-election", "RoleBinding/diskplane-leader-election",
		"Deployment/diskplane-controller", "DaemonSet/diskplane-node", "PodDisruptionBudget/diskplane-controller",
		"CSIDriver/ebs.csi.diskplane.io",
		"ValidatingAdmissionPolicy/diskplane-node-startup-taint", "ValidatingAdmissionPolicyBinding/diskplane-node-startup-taint",
		"Service/diskplane-controller-metrics", "Service/diskplane-node-metrics",
	}
	got := m.names()
	slices.Sort(want)
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Errorf("default objects:\n got %v\nwant %v", got, want)
	}
	for _, o := range m.objects {
		if ns := o.GetNamespace(); ns != "" && ns != namespace {
			t.Errorf("%s %s in namespace %q, want the release's", o.GetKind(), o.GetName(), ns)
		}
		if o.GetLabels()["app.kubernetes.io/name"] != "diskplane" {
			t.Errorf("%s %s lacks the chart's labels: %v", o.GetKind(), o.GetName(), o.GetLabels())
		}
	}
}

// TestControllerLeavesANodeThatIsOff checks the controller's tolerations:
// a node that stops answering keeps it for Kubernetes' 5 minutes (it may
// come back), but a node declared off (the out-of-service taint) or any
// other NoExecute taint evicts it at once. Tolerating every NoExecute taint
// for 5 minutes kept a single replica on a dead node, and every attach in
// the cluster waited for it.
func TestControllerLeavesANodeThatIsOff(t *testing.T) {
	tolerations := render(t, "").controller().Spec.Template.Spec.Tolerations
	for _, tc := range []struct {
		taint corev1.Taint
		want  int64 // seconds tolerated; -1: not tolerated; 0: forever
	}{
		{corev1.Taint{Key: corev1.TaintNodeNotReady, Effect: corev1.TaintEffectNoExecute}, 300},
		{corev1.Taint{Key: corev1.TaintNodeUnreachable, Effect: corev1.TaintEffectNoExecute}, 300},
		{corev1.Taint{Key: corev1.TaintNodeOutOfService, Value: "nodeshutdown", Effect: corev1.TaintEffectNoExecute}, -1},
		{corev1.Taint{Key: "example.com/maintenance", Effect: corev1.TaintEffectNoExecute}, -1},
		{corev1.Taint{Key: "CriticalAddonsOnly", Value: "true", Effect: corev1.TaintEffectNoSchedule}, 0},
		// The node plugin's startup taint: not the controller's concern.
		{corev1.Taint{Key: "ebs.csi.diskplane.io/agent-not-ready", Effect: corev1.TaintEffectNoExecute}, 0},
	} {
		got := int64(-1)
		for _, tol := range tolerations {
			if tol.ToleratesTaint(klog.Background(), &tc.taint, false) {
				got = 0
				if tol.TolerationSeconds != nil {
					got = *tol.TolerationSeconds
				}
				break
			}
		}
		if got != tc.want {
			t.Errorf("taint %s:%s tolerated for %d s (-1: not at all, 0: forever), want %d; tolerations %+v",
				tc.taint.Key, tc.taint.Effect, got, tc.want, tolerations)
		}
	}
}

func TestDefaultController(t *testing.T) {
	m := render(t, "")
	d := m.controller()
	spec := d.Spec.Template.Spec
	if *d.Spec.Replicas != 2 {
		t.Errorf("replicas = %d, want 2", *d.Spec.Replicas)
	}
	if spec.PriorityClassName != "system-cluster-critical" {
		t.Errorf("priority class %q", spec.PriorityClassName)
	}
	if spec.ServiceAccountName != "diskplane-controller" {
		t.Errorf("service account %q", spec.ServiceAccountName)
	}
	aa := spec.Affinity.PodAntiAffinity
	if aa == nil || len(aa.PreferredDuringSchedulingIgnoredDuringExecution) != 1 ||
		aa.PreferredDuringSchedulingIgnoredDuringExecution[0].PodAffinityTerm.TopologyKey != corev1.LabelHostname {
		t.Errorf("anti-affinity = %+v, want preferred by hostname", spec.Affinity)
	}
	wantContainers := []string{"diskplane", "csi-provisioner", "csi-attacher", "csi-resizer", "csi-snapshotter"}
	if got := containerNames(spec); !slices.Equal(got, wantContainers) {
		t.Fatalf("containers = %v, want %v", got, wantContainers)
	}

	plugin := container(spec, "diskplane")
	if plugin.Image != pluginImage+":v0.1.0" {
		t.Errorf("plugin image %q", plugin.Image)
	}
	for _, arg := range []string{"--mode=controller", "--endpoint=unix:///csi/csi.sock", "--driver-name=ebs.csi.diskplane.io", "--http-endpoint=:3301", "--user-agent-extra=helm"} {
		if !hasArg(plugin.Args, arg) {
			t.Errorf("plugin args %v lack %s", plugin.Args, arg)
		}
	}
	// No cloud settings unless asked for: credentials come from the SDK's chain.
	for _, name := range []string{"AWS_REGION", "AWS_ENDPOINT_URL_EC2", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"} {
		if env(plugin, name) != nil {
			t.Errorf("plugin has %s by default", name)
		}
	}
	if plugin.LivenessProbe == nil || plugin.LivenessProbe.HTTPGet.Path != "/healthz" {
		t.Errorf("plugin liveness probe %+v", plugin.LivenessProbe)
	}
	if sc := plugin.SecurityContext; sc == nil || !*sc.ReadOnlyRootFilesystem || *sc.AllowPrivilegeEscalation {
		t.Errorf("plugin security context %+v", sc)
	}
	if psc := spec.SecurityContext; psc == nil || !*psc.RunAsNonRoot {
		t.Errorf("controller pod does not run as non-root: %+v", psc)
	}

	for name, image := range defaultSidecarImages {
		c := container(spec, name)
		if c.Image != image {
			t.Errorf("%s image %q, want %q", name, c.Image, image)
		}
		for _, arg := range []string{"--csi-address=/csi/csi.sock", "--leader-election=true", "--leader-election-lease-duration=15s"} {
			if !hasArg(c.Args, arg) {
				t.Errorf("%s args %v lack %s", name, c.Args, arg)
			}
		}
		if _, ok := argWithPrefix(c.Args, "--retry-interval-max="); !ok {
			t.Errorf("%s has no retry bound", name)
		}
		if c.LivenessProbe == nil || c.LivenessProbe.HTTPGet.Path != "/healthz/leader-election" {
			t.Errorf("%s liveness probe %+v", name, c.LivenessProbe)
		}
		if len(c.Ports) != 1 {
			t.Errorf("%s ports %v, want its metrics port", name, c.Ports)
		} else if want := fmt.Sprintf("--http-endpoint=:%d", c.Ports[0].ContainerPort); !hasArg(c.Args, want) {
			t.Errorf("%s args %v lack %s (its container port)", name, c.Args, want)
		}
	}
	checks := map[string][]string{
		"csi-provisioner": {"--extra-create-metadata", "--timeout=60s", "--worker-threads=100", "--default-fstype=ext4", "--retry-interval-max=5m"},
		"csi-attacher":    {"--timeout=120s", "--worker-threads=100"},
		"csi-resizer":     {"--extra-modify-metadata", "--resize-timeout=120s", "--modify-timeout=120s", "--workers=100", "--handle-volume-inuse-error=false"},
		"csi-snapshotter": {"--extra-create-metadata", "--timeout=60s", "--feature-gates=CSIVolumeGroupSnapshot=false"},
	}
	for name, args := range checks {
		c := container(spec, name)
		for _, arg := range args {
			if !hasArg(c.Args, arg) {
				t.Errorf("%s args %v lack %s", name, c.Args, arg)
			}
		}
	}

	pdb := decode[policyv1.PodDisruptionBudget](m, m.get("PodDisruptionBudget", "diskplane-controller"))
	if pdb.Spec.MaxUnavailable.IntValue() != 1 {
		t.Errorf("PDB maxUnavailable %v", pdb.Spec.MaxUnavailable)
	}
	if !labelsMatch(pdb.Spec.Selector.MatchLabels, d.Spec.Template.Labels) {
		t.Errorf("PDB selector %v does not select the controller pods %v", pdb.Spec.Selector.MatchLabels, d.Spec.Template.Labels)
	}
}

// labelsMatch tells whether selector selects labels.
func labelsMatch(selector, labels map[string]string) bool {
	for k, v := range selector {
		if labels[k] != v {
			return false
		}
	}
	return len(selector) > 0
}

func TestDefaultNode(t *testing.T) {
	m := render(t, "")
	ds := m.node()
	spec := ds.Spec.Template.Spec
	if got := containerNames(spec); !slices.Equal(got, []string{"diskplane"}) {
		t.Fatalf("node containers = %v, want the plugin alone", got)
	}
	plugin := container(spec, "diskplane")
	for _, arg := range []string{"--mode=node", "--endpoint=unix:///var/lib/kubelet/plugins/ebs.csi.diskplane.io/csi.sock", "--http-endpoint=:3302",
		// The plugin registers itself: the kubelet dials the same socket on the host.
		"--kubelet-registration-path=/var/lib/kubelet/plugins/ebs.csi.diskplane.io/csi.sock",
		"--plugin-registration-dir=/var/lib/kubelet/plugins_registry"} {
		if !hasArg(plugin.Args, arg) {
			t.Errorf("node args %v lack %s", plugin.Args, arg)
		}
	}
	if sc := plugin.SecurityContext; sc == nil || sc.Privileged == nil || !*sc.Privileged {
		t.Errorf("node plugin is not privileged: %+v", sc)
	}
	if spec.PriorityClassName != "system-node-critical" {
		t.Errorf("priority class %q", spec.PriorityClassName)
	}
	if !slices.Equal(spec.Tolerations, []corev1.Toleration{{Operator: corev1.TolerationOpExists}}) {
		t.Errorf("tolerations %v, want every taint tolerated", spec.Tolerations)
	}
	nodeName := env(plugin, "CSI_NODE_NAME")
	if nodeName == nil || nodeName.ValueFrom == nil || nodeName.ValueFrom.FieldRef.FieldPath != "spec.nodeName" {
		t.Errorf("CSI_NODE_NAME = %+v, want spec.nodeName", nodeName)
	}
	for _, c := range []string{"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_ENDPOINT_URL_EC2", "AWS_EC2_METADATA_SERVICE_ENDPOINT"} {
		if env(plugin, c) != nil {
			t.Errorf("node plugin has %s", c)
		}
	}
	mounts := map[string]corev1.VolumeMount{}
	for _, vm := range plugin.VolumeMounts {
		mounts[vm.MountPath] = vm
	}
	if vm, ok := mounts["/var/lib/kubelet"]; !ok || vm.MountPropagation == nil || *vm.MountPropagation != corev1.MountPropagationBidirectional {
		t.Errorf("kubelet dir mount %+v, want Bidirectional", vm)
	}
	if _, ok := mounts["/dev"]; !ok {
		t.Errorf("no /dev mount in %v", plugin.VolumeMounts)
	}
	hostPaths := map[string]string{}
	for _, v := range spec.Volumes {
		if v.HostPath != nil {
			hostPaths[v.Name] = v.HostPath.Path
		}
	}
	if hostPaths["kubelet-dir"] != "/var/lib/kubelet" || hostPaths["device-dir"] != "/dev" {
		t.Errorf("host paths %v", hostPaths)
	}
	if p := plugin.LivenessProbe; p == nil || p.HTTPGet.Path != "/healthz" || p.HTTPGet.Port.String() != "http" {
		t.Errorf("node liveness probe %+v, want the plugin's own /healthz", p)
	}
	// The preStop hook waits for the detaches of a node going away, within
	// a grace period long enough for them.
	if l := plugin.Lifecycle; l == nil || l.PreStop == nil || l.PreStop.Exec == nil ||
		!slices.Equal(l.PreStop.Exec.Command, []string{"/bin/diskplane", "pre-stop", "--driver-name=ebs.csi.diskplane.io", "--log-to=/proc/1/fd/2", "--v=2"}) {
		t.Errorf("node preStop hook %+v", l)
	}
	if g := spec.TerminationGracePeriodSeconds; g == nil || *g != 60 {
		t.Errorf("node terminationGracePeriodSeconds %v, want 60", g)
	}
	// The node's account has no cloud access.
	sa := decode[corev1.ServiceAccount](m, m.get("ServiceAccount", "diskplane-node"))
	if len(sa.Annotations) != 0 {
		t.Errorf("node ServiceAccount annotations %v", sa.Annotations)
	}
}

func TestDefaultRBAC(t *testing.T) {
	m := render(t, "")
	node := decode[rbacv1.ClusterRole](m, m.get("ClusterRole", "diskplane-node"))
	want := []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get", "patch"}},
		{APIGroups: []string{"storage.k8s.io"}, Resources: []string{"csinodes"}, Verbs: []string{"get"}},
		{APIGroups: []string{"storage.k8s.io"}, Resources: []string{"volumeattachments"}, Verbs: []string{"list"}},
		{APIGroups: []string{"storage.k8s.io"}, Resources: []string{"csidrivers"}, ResourceNames: []string{"ebs.csi.diskplane.io"},
			Verbs: []string{"get", "list", "watch"}},
		{APIGroups: []string{""}, Resources: []string{"events"}, Verbs: []string{"create", "patch"}},
	}
	if !slices.EqualFunc(node.Rules, want, ruleEqual) {
		t.Errorf("node rules %+v, want only get and patch on nodes, get on csinodes, list on volumeattachments, reading its own CSIDriver and writing events", node.Rules)
	}
	// Every controller sidecar role is bound to the controller's account,
	// and nothing grants anything to the node's account but its own role.
	for _, b := range m.ofKind("ClusterRoleBinding") {
		crb := decode[rbacv1.ClusterRoleBinding](m, b)
		wantSA := "diskplane-controller"
		if crb.Name == "diskplane-node" {
			wantSA = "diskplane-node"
		}
		if len(crb.Subjects) != 1 || crb.Subjects[0].Name != wantSA || crb.Subjects[0].Namespace != namespace {
			t.Errorf("ClusterRoleBinding %s subjects %+v, want %s", crb.Name, crb.Subjects, wantSA)
		}
		if crb.RoleRef.Name != crb.Name {
			t.Errorf("ClusterRoleBinding %s binds %s", crb.Name, crb.RoleRef.Name)
		}
	}
	for _, r := range m.ofKind("ClusterRole") {
		for _, rule := range decode[rbacv1.ClusterRole](m, r).Rules {
			if slices.Contains(rule.Verbs, "*") || slices.Contains(rule.Resources, "*") || slices.Contains(rule.Resources, "secrets") {
				t.Errorf("ClusterRole %s has a broad rule %+v", r.GetName(), rule)
			}
		}
	}
}

func ruleEqual(a, b rbacv1.PolicyRule) bool {
	return slices.Equal(a.APIGroups, b.APIGroups) && slices.Equal(a.Resources, b.Resources) && slices.Equal(a.Verbs, b.Verbs) &&
		slices.Equal(a.ResourceNames, b.ResourceNames)
}

func TestDefaultCSIDriver(t *testing.T) {
	m := render(t, "")
	d := decode[storagev1.CSIDriver](m, m.get("CSIDriver", "ebs.csi.diskplane.io"))
	if d.Spec.AttachRequired == nil || !*d.Spec.AttachRequired {
		t.Error("attachRequired is not true")
	}
	if d.Spec.PodInfoOnMount == nil || *d.Spec.PodInfoOnMount {
		t.Error("podInfoOnMount is not false")
	}
	if d.Spec.FSGroupPolicy == nil || *d.Spec.FSGroupPolicy != storagev1.FileFSGroupPolicy {
		t.Errorf("fsGroupPolicy %v, want File", d.Spec.FSGroupPolicy)
	}
	if d.Spec.SELinuxMount != nil || d.Spec.RequiresRepublish != nil || d.Spec.TokenRequests != nil {
		t.Errorf("optional fields set by default: %+v", d.Spec)
	}
}

func TestDefaultTaintPolicy(t *testing.T) {
	m := render(t, "")
	p := m.get("ValidatingAdmissionPolicy", "diskplane-node-startup-taint")
	text := strings.Join(policyExpressions(t, p.Object), "\n")
	for _, want := range []string{
		`request.userInfo.username == "system:serviceaccount:kube-system:diskplane-node"`,
		`"ebs.csi.diskplane.io/agent-not-ready"`,
		"authentication.kubernetes.io/node-name",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("policy expressions lack %s:\n%s", want, text)
		}
	}
	b := m.get("ValidatingAdmissionPolicyBinding", "diskplane-node-startup-taint")
	if b.Object["spec"].(map[string]any)["policyName"] != "diskplane-node-startup-taint" {
		t.Errorf("binding %v", b.Object["spec"])
	}
}

// policyExpressions collects every CEL expression of a policy.
func policyExpressions(t *testing.T, o map[string]any) []string {
	t.Helper()
	var out []string
	spec := o["spec"].(map[string]any)
	for _, key := range []string{"matchConditions", "variables", "validations"} {
		items, _ := spec[key].([]any)
		for _, it := range items {
			out = append(out, it.(map[string]any)["expression"].(string))
		}
	}
	return out
}

func TestDefaultMetricsServices(t *testing.T) {
	m := render(t, "")
	d := m.controller()
	svc := decode[corev1.Service](m, m.get("Service", "diskplane-controller-metrics"))
	if !labelsMatch(svc.Spec.Selector, d.Spec.Template.Labels) {
		t.Errorf("controller metrics Service selects %v, pods have %v", svc.Spec.Selector, d.Spec.Template.Labels)
	}
	// Every Service port names a port of a container.
	ports := map[string]bool{}
	for _, c := range d.Spec.Template.Spec.Containers {
		for _, p := range c.Ports {
			ports[p.Name] = true
		}
	}
	if len(svc.Spec.Ports) != 5 {
		t.Errorf("controller metrics ports %v, want the plugin's and four sidecars'", svc.Spec.Ports)
	}
	for _, p := range svc.Spec.Ports {
		if !ports[p.TargetPort.StrVal] {
			t.Errorf("Service port %s targets %s, which no container has", p.Name, p.TargetPort.StrVal)
		}
	}
	ds := m.node()
	nsvc := decode[corev1.Service](m, m.get("Service", "diskplane-node-metrics"))
	if !labelsMatch(nsvc.Spec.Selector, ds.Spec.Template.Labels) || labelsMatch(nsvc.Spec.Selector, d.Spec.Template.Labels) {
		t.Errorf("node metrics Service selects %v", nsvc.Spec.Selector)
	}
}
