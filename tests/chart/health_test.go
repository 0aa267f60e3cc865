package chart

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
)

// TestHealthMonitor turns controller.healthMonitor on: the
// external-health-monitor-controller runs beside the plugin as the other
// sidecars do (leader elected, metrics and liveness on its port), with the
// RBAC it needs bound to the controller's account; off (the default),
// nothing of it is rendered.
func TestHealthMonitor(t *testing.T) {
	off := render(t, "")
	if c := container(off.controller().Spec.Template.Spec, "csi-external-health-monitor-controller"); c != nil {
		t.Fatalf("the health monitor runs by default: %+v", c)
	}
	if off.find("ClusterRole", "diskplane-health-monitor") != nil {
		t.Fatal("the health monitor's ClusterRole is rendered although it is off")
	}

	m := render(t, "controller: {healthMonitor: {enabled: true}}\nsidecars: {healthMonitor: {monitorInterval: 30s, enableNodeWatcher: true}}\n")
	spec := m.controller().Spec.Template.Spec
	c := container(spec, "csi-external-health-monitor-controller")
	if c == nil {
		t.Fatalf("no health monitor container among %v", containerNames(spec))
	}
	if c.Image != "registry.k8s.io/sig-storage/csi-external-health-monitor-controller:v0.18.0" {
		t.Errorf("image %s", c.Image)
	}
	for _, arg := range []string{"--csi-address=/csi/csi.sock", "--leader-election=true", "--http-endpoint=:3315",
		"--monitor-interval=30s", "--list-volumes-interval=5m", "--timeout=15s", "--enable-node-watcher=true"} {
		if !hasArg(c.Args, arg) {
			t.Errorf("health monitor args %v lack %s", c.Args, arg)
		}
	}
	if p := c.LivenessProbe; p == nil || p.HTTPGet.Path != "/healthz/leader-election" || p.HTTPGet.Port.String() != "health-monitor" {
		t.Errorf("liveness probe %+v", p)
	}
	role := decode[rbacv1.ClusterRole](m, m.get("ClusterRole", "diskplane-health-monitor"))
	want := []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"persistentvolumes", "persistentvolumeclaims", "nodes", "pods"}, Verbs: []string{"get", "list", "watch"}},
		{APIGroups: []string{""}, Resources: []string{"events"}, Verbs: []string{"get", "list", "watch", "create", "patch"}},
	}
	if !slices.EqualFunc(role.Rules, want, ruleEqual) {
		t.Errorf("health monitor rules %+v", role.Rules)
	}
	binding := decode[rbacv1.ClusterRoleBinding](m, m.get("ClusterRoleBinding", "diskplane-health-monitor"))
	if len(binding.Subjects) != 1 || binding.Subjects[0].Name != "diskplane-controller" {
		t.Errorf("health monitor binding %+v", binding.Subjects)
	}
	svc := decode[corev1.Service](m, m.get("Service", "diskplane-controller-metrics"))
	found := false
	for _, p := range svc.Spec.Ports {
		found = found || (p.Name == "health-monitor" && p.Port == 3315)
	}
	if !found {
		t.Errorf("metrics Service ports %+v lack the health monitor's", svc.Spec.Ports)
	}
}

// TestPreStopHookOff: without the preStop hook, the node plugin has no
// lifecycle hook and its account may not list VolumeAttachments.
func TestPreStopHookOff(t *testing.T) {
	m := render(t, "node: {preStopHook: {enabled: false}, terminationGracePeriodSeconds: 30}\n")
	spec := m.node().Spec.Template.Spec
	if l := container(spec, "diskplane").Lifecycle; l != nil {
		t.Errorf("node plugin lifecycle %+v, want none", l)
	}
	if g := spec.TerminationGracePeriodSeconds; g == nil || *g != 30 {
		t.Errorf("terminationGracePeriodSeconds %v, want 30", g)
	}
	for _, r := range decode[rbacv1.ClusterRole](m, m.get("ClusterRole", "diskplane-node")).Rules {
		if slices.Contains(r.Resources, "volumeattachments") {
			t.Errorf("the node may still read VolumeAttachments: %+v", r)
		}
	}
}
