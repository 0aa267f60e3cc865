package chart

import (
	"slices"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
)

// TestNodeWitness: by default the plugin runs its node witness
// (--node-witness), knows its namespace for the witness's Lease, and has
// exactly the access the witness needs; off, none of it is rendered.
func TestNodeWitness(t *testing.T) {
	m := render(t, "")
	c := container(m.controller().Spec.Template.Spec, "diskplane")
	if !hasArg(c.Args, "--node-witness") {
		t.Errorf("plugin args %v lack --node-witness", c.Args)
	}
	if e := env(c, "POD_NAMESPACE"); e == nil || e.ValueFrom == nil || e.ValueFrom.FieldRef == nil || e.ValueFrom.FieldRef.FieldPath != "metadata.namespace" {
		t.Errorf("plugin env %+v lacks POD_NAMESPACE from the downward API", c.Env)
	}
	role := decode[rbacv1.ClusterRole](m, m.get("ClusterRole", "diskplane-node-witness"))
	want := []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get", "list", "update"}},
		{APIGroups: []string{"storage.k8s.io"}, Resources: []string{"csinodes"}, Verbs: []string{"get"}},
		{APIGroups: []string{"storage.k8s.io"}, Resources: []string{"volumeattachments"}, Verbs: []string{"list"}},
		{APIGroups: []string{""}, Resources: []string{"persistentvolumes"}, Verbs: []string{"list"}},
		{APIGroups: []string{""}, Resources: []string{"events"}, Verbs: []string{"create", "patch"}},
	}
	if !slices.EqualFunc(role.Rules, want, ruleEqual) {
		t.Errorf("node witness rules %+v", role.Rules)
	}
	binding := decode[rbacv1.ClusterRoleBinding](m, m.get("ClusterRoleBinding", "diskplane-node-witness"))
	if len(binding.Subjects) != 1 || binding.Subjects[0].Name != "diskplane-controller" {
		t.Errorf("node witness binding %+v", binding.Subjects)
	}

	off := render(t, "controller: {nodeWitness: {enabled: false}}\n")
	if hasArg(container(off.controller().Spec.Template.Spec, "diskplane").Args, "--node-witness") {
		t.Error("--node-witness is set although the witness is off")
	}
	if off.find("ClusterRole", "diskplane-node-witness") != nil || off.find("ClusterRoleBinding", "diskplane-node-witness") != nil {
		t.Error("the node witness's RBAC is rendered although it is off")
	}
}
