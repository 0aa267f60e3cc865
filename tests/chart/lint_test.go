package chart

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// helm lint --strict passes with the defaults and with every option on.
func TestLint(t *testing.T) {
	tests := []struct {
		name   string
		values string
	}{
		{name: "defaults"},
		{name: "everything on", values: `
controller:
  region: us-east-1
  ec2Endpoint: http://$(HOST_IP):8700
  awsCredentials: {create: true, accessKeyID: a, secretAccessKey: b}
  extraTags: {team: storage}
  k8sTagClusterID: c1
node: {classicSidecars: true, imdsEndpoint: http://$(HOST_IP):8701, tolerateAllTaints: false}
csiDriver: {seLinuxMount: true, requiresRepublish: true, tokenRequests: [{audience: x}]}
storageClasses: [{name: gp3, default: true, parameters: {type: gp3}}]
volumeSnapshotClasses: [{name: snap, deletionPolicy: Delete}]
volumeAttributesClasses: [{name: fast, parameters: {iops: "4000"}}]
metrics: {serviceMonitor: {enabled: true}}
`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			args := []string{"lint", chartDir, "--strict", "--namespace", namespace}
			if tc.values != "" {
				args = append(args, "--values", valuesFile(t, tc.values))
			}
			stdout, stderr, err := runHelm(t, args...)
			if err != nil || !strings.Contains(stdout, "0 chart(s) failed") {
				t.Fatalf("helm lint: %v\n%s%s", err, stdout, stderr)
			}
		})
	}
}

// The chart says what to do next.
func TestNotes(t *testing.T) {
	stdout, stderr, err := runHelm(t, "install", releaseName, chartDir, "--namespace", namespace, "--dry-run=client")
	if err != nil {
		t.Fatalf("helm install --dry-run: %v\n%s", err, stderr)
	}
	for _, want := range []string{"rollout status deployment/diskplane-controller", "ebs.csi.diskplane.io/agent-not-ready:NoExecute", "iam-policy.json", "provisioner: ebs.csi.diskplane.io"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("NOTES lack %q:\n%s", want, stdout)
		}
	}
}

// deploy/kubernetes is what the chart renders (make kustomize).
func TestKustomizeBaseUpToDate(t *testing.T) {
	cmd := exec.Command(filepath.Join(repoRoot, "hack", "chart", "kustomize.sh"), "--check")
	cmd.Env = append(os.Environ(), helmEnv+"="+helm(t))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("deploy/kubernetes is out of date (run make kustomize): %v\n%s", err, out)
	}
}
