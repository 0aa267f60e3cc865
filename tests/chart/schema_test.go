package chart

import (
	"strings"
	"testing"
)

// The values schema rejects typos and wrong types with a message that
// points at the bad key, before anything is rendered.
func TestSchemaRejectsBadValues(t *testing.T) {
	tests := []struct {
		name   string
		values string
		// want appears in Helm's error output: the offending key or value.
		want string
	}{
		{name: "typo at the top", values: "driverNmae: x\n", want: "driverNmae"},
		{name: "typo in the controller", values: "controller: {replica: 3}\n", want: "replica"},
		{name: "typo in a sidecar", values: "sidecars: {provisioner: {timeOut: 30s}}\n", want: "timeOut"},
		{name: "typo in the node", values: "node: {tolerateAllTaint: false}\n", want: "tolerateAllTaint"},
		{name: "typo in the CSIDriver", values: "csiDriver: {seLinuxMounts: true}\n", want: "seLinuxMounts"},
		{name: "typo in a StorageClass", values: "storageClasses: [{name: gp3, parameter: {type: gp3}}]\n", want: "parameter"},
		{name: "typo in metrics", values: "metrics: {serviceMonitors: {enabled: true}}\n", want: "serviceMonitors"},
		{name: "replicas as a string", values: "controller: {replicas: two}\n", want: "replicas"},
		{name: "zero replicas", values: "controller: {replicas: 0}\n", want: "replicas"},
		{name: "boolean as a string", values: "node: {classicSidecars: \"yes\"}\n", want: "classicSidecars"},
		{name: "timeout without a unit", values: "sidecars: {attacher: {timeout: \"120\"}}\n", want: "timeout"},
		{name: "unknown pull policy", values: "image: {pullPolicy: Sometimes}\n", want: "pullPolicy"},
		{name: "digest without its algorithm", values: "image: {digest: " + strings.Repeat("ab", 32) + "}\n", want: "digest"},
		{name: "short digest", values: "image: {digest: \"sha256:abcd\"}\n", want: "digest"},
		{name: "unknown anti-affinity", values: "controller: {antiAffinity: strict}\n", want: "antiAffinity"},
		{name: "sidecar image without a tag", values: "sidecars: {resizer: {image: {repository: x, tag: \"\", pullPolicy: Always}}}\n", want: "tag"},
		{name: "StorageClass without a name", values: "storageClasses: [{parameters: {type: gp3}}]\n", want: "name"},
		{name: "StorageClass with a bad binding mode", values: "storageClasses: [{name: a, volumeBindingMode: Later}]\n", want: "volumeBindingMode"},
		{name: "snapshot class without a deletion policy", values: "volumeSnapshotClasses: [{name: snap}]\n", want: "deletionPolicy"},
		{name: "attributes class without parameters", values: "volumeAttributesClasses: [{name: fast, parameters: {}}]\n", want: "parameters"},
		{name: "attach limit of zero", values: "node: {volumeAttachLimit: 0}\n", want: "volumeAttachLimit"},
		{name: "unknown metadata source", values: "node: {metadataSources: \"imds,ec2\"}\n", want: "metadataSources"},
		{name: "relative kubelet dir", values: "node: {kubeletDir: var/lib/kubelet}\n", want: "kubeletDir"},
		{name: "port of a sidecar", values: "controller: {httpPort: 3311}\n", want: "httpPort"},
		{name: "endpoint without a scheme", values: "controller: {ec2Endpoint: ec2.example.com}\n", want: "ec2Endpoint"},
		{name: "tag with a comma", values: "controller: {extraTags: {team: \"a,b\"}}\n", want: "extraTags"},
		{name: "driver name with capitals", values: "driverName: EBS.example.com\n", want: "driverName"},
		{name: "argument that is no flag", values: "controller: {additionalArgs: [\"v=5\"]}\n", want: "additionalArgs"},
		{name: "short token lifetime", values: "csiDriver: {tokenRequests: [{audience: a, expirationSeconds: 60}]}\n", want: "expirationSeconds"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out := renderError(t, tc.values)
			if !strings.Contains(out, "schema") || !strings.Contains(out, tc.want) {
				t.Errorf("error does not name the schema and %q:\n%s", tc.want, out)
			}
		})
	}
}

// Values the schema allows but the templates cannot use fail with a message
// that says what to set.
func TestTemplateRejectsIncompleteValues(t *testing.T) {
	tests := []struct {
		name, values, want string
	}{
		{name: "static keys without keys", values: "controller: {awsCredentials: {create: true}}\n",
			want: "controller.awsCredentials.accessKeyID is required"},
		{name: "both attachment settings", values: "node: {volumeAttachLimit: 20, reservedVolumeAttachments: 1}\n",
			want: "set node.volumeAttachLimit or node.reservedVolumeAttachments, not both"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if out := renderError(t, tc.values); !strings.Contains(out, tc.want) {
				t.Errorf("error does not say %q:\n%s", tc.want, out)
			}
		})
	}
}

// The schema is no stricter than the chart's own defaults and examples:
// explicit copies of default-valued settings and nulls pass.
func TestSchemaAcceptsGoodValues(t *testing.T) {
	tests := []string{
		"node: {volumeAttachLimit: null, reservedVolumeAttachments: 0}\n",
		"controller: {modifyVolumeCoalesceWindow: 1500ms, podDisruptionBudget: {maxUnavailable: 50%}}\n",
		"storageClasses: [{name: a.b-c, parameters: {iops: 3000, encrypted: true, type: gp3}}]\n",
		"sidecars: {provisioner: {kubeAPIQPS: 7.5}}\n",
	}
	for _, values := range tests {
		render(t, values)
	}
}
