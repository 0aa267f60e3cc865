package chart

import (
	"slices"
	"strings"
	"testing"

	storagev1 "k8s.io/api/storage/v1"
)

// TestWorkloadIdentity: csiDriver.workloadIdentity asks the kubelet for the
// pods' tokens for STS's audience, republishes, and passes the tokens in
// the secrets where the API server has the field; the node plugin is told
// the audience.
func TestWorkloadIdentity(t *testing.T) {
	tests := []struct {
		name, values, kubeVersion string
		wantTokens                []string
		wantRepublish             bool
		wantInSecrets             bool
		wantFlag                  string
	}{
		{name: "off by default", kubeVersion: "1.35.0"},
		{name: "on, an API server with serviceAccountTokenInSecrets", kubeVersion: "1.35.0",
			values:     "csiDriver: {workloadIdentity: {enabled: true}}\n",
			wantTokens: []string{"sts.amazonaws.com"}, wantRepublish: true, wantInSecrets: true, wantFlag: "--workload-identity-audience=sts.amazonaws.com"},
		{name: "on, an older API server", kubeVersion: "1.34.2",
			values:     "csiDriver: {workloadIdentity: {enabled: true}}\n",
			wantTokens: []string{"sts.amazonaws.com"}, wantRepublish: true, wantFlag: "--workload-identity-audience=sts.amazonaws.com"},
		{name: "secrets forced off, no republish, another audience", kubeVersion: "1.36.0",
			values:     "csiDriver: {workloadIdentity: {enabled: true, tokenInSecrets: false, requiresRepublish: false, audience: sts.example.com}}\n",
			wantTokens: []string{"sts.example.com"}, wantFlag: "--workload-identity-audience=sts.example.com"},
		{name: "beside other token requests, the audience once", kubeVersion: "1.35.0",
			values:     "csiDriver: {tokenRequests: [{audience: vault}, {audience: sts.amazonaws.com, expirationSeconds: 7200}], workloadIdentity: {enabled: true}}\n",
			wantTokens: []string{"vault", "sts.amazonaws.com"}, wantRepublish: true, wantInSecrets: true, wantFlag: "--workload-identity-audience=sts.amazonaws.com"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := render(t, tc.values, "--kube-version", tc.kubeVersion)
			d := decode[storagev1.CSIDriver](m, m.get("CSIDriver", "ebs.csi.diskplane.io"))
			var audiences []string
			for _, r := range d.Spec.TokenRequests {
				audiences = append(audiences, r.Audience)
				if r.Audience == "sts.amazonaws.com" && (r.ExpirationSeconds == nil || (*r.ExpirationSeconds != 3600 && *r.ExpirationSeconds != 7200)) {
					t.Errorf("token lifetime %v", r.ExpirationSeconds)
				}
			}
			if len(audiences) != len(tc.wantTokens) || (len(audiences) > 0 && !slices.Equal(audiences, tc.wantTokens)) {
				t.Errorf("token audiences %v, want %v", audiences, tc.wantTokens)
			}
			if got := d.Spec.RequiresRepublish != nil && *d.Spec.RequiresRepublish; got != tc.wantRepublish {
				t.Errorf("requiresRepublish %t", got)
			}
			if got := d.Spec.ServiceAccountTokenInSecrets != nil && *d.Spec.ServiceAccountTokenInSecrets; got != tc.wantInSecrets {
				t.Errorf("serviceAccountTokenInSecrets %t", got)
			}
			if *d.Spec.PodInfoOnMount || !*d.Spec.AttachRequired {
				t.Errorf("fixed fields changed: %+v", d.Spec)
			}
			args := container(m.node().Spec.Template.Spec, "diskplane").Args
			if tc.wantFlag != "" && !hasArg(args, tc.wantFlag) {
				t.Errorf("node args %v lack %s", args, tc.wantFlag)
			}
			if tc.wantFlag == "" && slices.ContainsFunc(args, func(a string) bool { return strings.HasPrefix(a, "--workload-identity-audience") }) {
				t.Errorf("node args %v", args)
			}
		})
	}
	if msg := renderError(t, "csiDriver: {workloadIdentity: {tokenInSecrets: maybe}}\n"); msg == "" {
		t.Fatal("tokenInSecrets: maybe was accepted")
	}
}
