package chart

import (
	"maps"
	"os"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	storagev1 "k8s.io/api/storage/v1"
	"sigs.k8s.io/yaml"
)

// Each option renders what it promises, and nothing breaks the rest: every
// rendering is decoded strictly and its plugin flags checked (render).
func TestOptions(t *testing.T) {
	tests := []struct {
		name   string
		values string
		check  func(t *testing.T, m *manifest)
	}{
		{
			name: "cloud settings of the controller",
			values: `
controller:
  region: eu-west-1
  ec2Endpoint: http://$(HOST_IP):8700
  awsCredentials: {secretName: my-keys}
  serviceAccount:
    annotations: {eks.amazonaws.com/role-arn: "arn:aws:iam::111122223333:role/diskplane"}
`,
			check: func(t *testing.T, m *manifest) {
				plugin := container(m.controller().Spec.Template.Spec, "diskplane")
				if e := env(plugin, "AWS_REGION"); e == nil || e.Value != "eu-west-1" {
					t.Errorf("AWS_REGION = %+v", e)
				}
				// $(HOST_IP) expands only from a variable defined before it.
				if i, j := envIndex(plugin, "HOST_IP"), envIndex(plugin, "AWS_ENDPOINT_URL_EC2"); i < 0 || j < i ||
					plugin.Env[j].Value != "http://$(HOST_IP):8700" || plugin.Env[i].ValueFrom.FieldRef.FieldPath != "status.hostIP" {
					t.Errorf("endpoint env %+v", plugin.Env)
				}
				for _, k := range []string{"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"} {
					if e := env(plugin, k); e == nil || e.ValueFrom.SecretKeyRef.Name != "my-keys" {
						t.Errorf("%s = %+v", k, e)
					}
				}
				if m.find("Secret", "diskplane-aws-credentials") != nil {
					t.Error("a Secret was created although an existing one is named")
				}
				sa := decode[corev1.ServiceAccount](m, m.get("ServiceAccount", "diskplane-controller"))
				if sa.Annotations["eks.amazonaws.com/role-arn"] == "" {
					t.Errorf("IRSA annotation missing: %v", sa.Annotations)
				}
			},
		},
		{
			name:   "static keys in a Secret the chart creates",
			values: "controller: {awsCredentials: {create: true, accessKeyID: AKIDEXAMPLE, secretAccessKey: c2VjcmV0}}\n",
			check: func(t *testing.T, m *manifest) {
				s := decode[corev1.Secret](m, m.get("Secret", "diskplane-aws-credentials"))
				if s.StringData["access_key_id"] != "AKIDEXAMPLE" || s.StringData["secret_access_key"] != "c2VjcmV0" {
					t.Errorf("Secret data %v", s.StringData)
				}
				plugin := container(m.controller().Spec.Template.Spec, "diskplane")
				if e := env(plugin, "AWS_ACCESS_KEY_ID"); e == nil || e.ValueFrom.SecretKeyRef.Name != "diskplane-aws-credentials" {
					t.Errorf("AWS_ACCESS_KEY_ID = %+v", e)
				}
				// The node never sees the keys.
				if env(container(m.node().Spec.Template.Spec, "diskplane"), "AWS_ACCESS_KEY_ID") != nil {
					t.Error("the node plugin got the keys")
				}
			},
		},
		{
			name: "controller tags and coalescing",
			values: `
controller:
  extraTags: {team: storage, cost-center: "1234"}
  k8sTagClusterID: prod-1
  modifyVolumeCoalesceWindow: 3s
  additionalArgs: [--v=5]
`,
			check: func(t *testing.T, m *manifest) {
				args := container(m.controller().Spec.Template.Spec, "diskplane").Args
				for _, a := range []string{"--extra-tags=cost-center=1234,team=storage", "--k8s-tag-cluster-id=prod-1", "--modify-volume-coalesce-window=3s"} {
					if !hasArg(args, a) {
						t.Errorf("args %v lack %s", args, a)
					}
				}
				if args[len(args)-1] != "--v=5" {
					t.Errorf("additional args not last: %v", args)
				}
			},
		},
		{
			name:   "hard anti-affinity and no PDB",
			values: "controller: {antiAffinity: hard, podDisruptionBudget: {enabled: false}, replicas: 3}\n",
			check: func(t *testing.T, m *manifest) {
				d := m.controller()
				aa := d.Spec.Template.Spec.Affinity.PodAntiAffinity
				if len(aa.RequiredDuringSchedulingIgnoredDuringExecution) != 1 || len(aa.PreferredDuringSchedulingIgnoredDuringExecution) != 0 {
					t.Errorf("anti-affinity %+v, want required", aa)
				}
				if *d.Spec.Replicas != 3 {
					t.Errorf("replicas %d", *d.Spec.Replicas)
				}
				if m.find("PodDisruptionBudget", "diskplane-controller") != nil {
					t.Error("PDB rendered although disabled")
				}
			},
		},
		{
			name:   "own affinity replaces the anti-affinity",
			values: "controller: {affinity: {nodeAffinity: {requiredDuringSchedulingIgnoredDuringExecution: {nodeSelectorTerms: [{matchExpressions: [{key: pool, operator: In, values: [system]}]}]}}}}\n",
			check: func(t *testing.T, m *manifest) {
				a := m.controller().Spec.Template.Spec.Affinity
				if a.NodeAffinity == nil || a.PodAntiAffinity != nil {
					t.Errorf("affinity %+v", a)
				}
			},
		},
		{
			name:   "no anti-affinity",
			values: "controller: {antiAffinity: none}\n",
			check: func(t *testing.T, m *manifest) {
				if a := m.controller().Spec.Template.Spec.Affinity; a != nil {
					t.Errorf("affinity %+v", a)
				}
			},
		},
		{
			name:   "no snapshotter",
			values: "sidecars: {snapshotter: {enabled: false}}\n",
			check: func(t *testing.T, m *manifest) {
				if container(m.controller().Spec.Template.Spec, "csi-snapshotter") != nil {
					t.Error("snapshotter still runs")
				}
				for _, kind := range []string{"ClusterRole", "ClusterRoleBinding"} {
					if m.find(kind, "diskplane-snapshotter") != nil {
						t.Errorf("%s diskplane-snapshotter still rendered", kind)
					}
				}
				svc := decode[corev1.Service](m, m.get("Service", "diskplane-controller-metrics"))
				for _, p := range svc.Spec.Ports {
					if p.Name == "snapshotter" {
						t.Error("metrics Service still has the snapshotter port")
					}
				}
			},
		},
		{
			name: "tuned sidecars",
			values: `
sidecars:
  provisioner: {timeout: 90s, workerThreads: 20, retryIntervalMax: 30m, kubeAPIQPS: 50, additionalArgs: [--volume-name-prefix=dp]}
  resizer: {resizeTimeout: 3m, modifyTimeout: 4m}
  leaderElection: {leaseDuration: 30s, renewDeadline: 20s, retryPeriod: 4s}
`,
			check: func(t *testing.T, m *manifest) {
				spec := m.controller().Spec.Template.Spec
				p := container(spec, "csi-provisioner").Args
				for _, a := range []string{"--timeout=90s", "--worker-threads=20", "--retry-interval-max=30m", "--kube-api-qps=50", "--volume-name-prefix=dp", "--leader-election-lease-duration=30s"} {
					if !hasArg(p, a) {
						t.Errorf("provisioner args %v lack %s", p, a)
					}
				}
				r := container(spec, "csi-resizer").Args
				if !hasArg(r, "--resize-timeout=3m") || !hasArg(r, "--modify-timeout=4m") || !hasArg(r, "--leader-election-retry-period=4s") {
					t.Errorf("resizer args %v", r)
				}
			},
		},
		{
			name: "classic node sidecars",
			values: `
node: {classicSidecars: true}
sidecars:
  nodeDriverRegistrar: {image: {repository: example.com/registrar, tag: v9, pullPolicy: Always}}
`,
			check: func(t *testing.T, m *manifest) {
				spec := m.node().Spec.Template.Spec
				if got := containerNames(spec); !slices.Equal(got, []string{"diskplane", "node-driver-registrar", "liveness-probe"}) {
					t.Fatalf("containers %v", got)
				}
				plugin := container(spec, "diskplane")
				if _, ok := argWithPrefix(plugin.Args, "--kubelet-registration"); ok {
					t.Errorf("plugin registers itself beside the registrar: %v", plugin.Args)
				}
				reg := container(spec, "node-driver-registrar")
				if reg.Image != "example.com/registrar:v9" || !hasArg(reg.Args, "--kubelet-registration-path=/var/lib/kubelet/plugins/ebs.csi.diskplane.io/csi.sock") {
					t.Errorf("registrar %s %v", reg.Image, reg.Args)
				}
				if plugin.LivenessProbe.HTTPGet.Port.String() != "healthz" {
					t.Errorf("plugin liveness %+v, want the livenessprobe sidecar's port", plugin.LivenessProbe)
				}
			},
		},
		{
			name: "node settings",
			values: `
node:
  kubeletDir: /data/kubelet/
  imdsEndpoint: http://$(HOST_IP):8701
  metadataSources: kubernetes
  volumeAttachLimit: 25
  tolerateAllTaints: false
  tolerations: [{key: dedicated, operator: Equal, value: storage, effect: NoSchedule}]
  env: [{name: EXTRA, value: "1"}]
`,
			check: func(t *testing.T, m *manifest) {
				spec := m.node().Spec.Template.Spec
				plugin := container(spec, "diskplane")
				for _, a := range []string{"--endpoint=unix:///data/kubelet/plugins/ebs.csi.diskplane.io/csi.sock", "--metadata-sources=kubernetes", "--volume-attach-limit=25"} {
					if !hasArg(plugin.Args, a) {
						t.Errorf("node args %v lack %s", plugin.Args, a)
					}
				}
				if i, j := envIndex(plugin, "HOST_IP"), envIndex(plugin, "AWS_EC2_METADATA_SERVICE_ENDPOINT"); i < 0 || j < i {
					t.Errorf("IMDS env %+v", plugin.Env)
				}
				if env(plugin, "EXTRA") == nil {
					t.Error("extra env missing")
				}
				if !slices.ContainsFunc(plugin.VolumeMounts, func(v corev1.VolumeMount) bool { return v.MountPath == "/data/kubelet" }) {
					t.Errorf("kubelet dir not mounted: %v", plugin.VolumeMounts)
				}
				want := []corev1.Toleration{
					{Key: "ebs.csi.diskplane.io/agent-not-ready", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute},
					{Key: "dedicated", Operator: corev1.TolerationOpEqual, Value: "storage", Effect: corev1.TaintEffectNoSchedule},
				}
				if !slices.Equal(spec.Tolerations, want) {
					t.Errorf("tolerations %+v, want %+v", spec.Tolerations, want)
				}
			},
		},
		{
			name:   "reserved attachments",
			values: "node: {reservedVolumeAttachments: 0}\n",
			check: func(t *testing.T, m *manifest) {
				args := container(m.node().Spec.Template.Spec, "diskplane").Args
				if !hasArg(args, "--reserved-volume-attachments=0") {
					t.Errorf("node args %v", args)
				}
				if _, ok := argWithPrefix(args, "--volume-attach-limit"); ok {
					t.Errorf("node args %v set a limit", args)
				}
			},
		},
		{
			name:   "node plugin may not touch taints",
			values: "node: {startupTaint: {remove: false}, preStopHook: {enabled: false}}\n",
			check: func(t *testing.T, m *manifest) {
				role := decode[rbacv1.ClusterRole](m, m.get("ClusterRole", "diskplane-node"))
				want := []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get"}},
					{APIGroups: []string{"storage.k8s.io"}, Resources: []string{"csidrivers"}, ResourceNames: []string{"ebs.csi.diskplane.io"},
						Verbs: []string{"get", "list", "watch"}},
					{APIGroups: []string{""}, Resources: []string{"events"}, Verbs: []string{"create", "patch"}}}
				if !slices.EqualFunc(role.Rules, want, ruleEqual) {
					t.Errorf("node role %+v, want only get on nodes, reading its own CSIDriver and writing events", role.Rules)
				}
				if m.find("ValidatingAdmissionPolicy", "diskplane-node-startup-taint") != nil {
					t.Error("policy rendered without the permission it guards")
				}
			},
		},
		{
			name:   "taint removal without the admission policy",
			values: "node: {startupTaint: {admissionPolicy: false}}\n",
			check: func(t *testing.T, m *manifest) {
				if m.find("ValidatingAdmissionPolicy", "diskplane-node-startup-taint") != nil || m.find("ValidatingAdmissionPolicyBinding", "diskplane-node-startup-taint") != nil {
					t.Error("policy still rendered")
				}
			},
		},
		{
			name: "another driver name, namespace of the policy",
			values: `
driverName: ebs.csi.aws.com
node: {serviceAccount: {name: ebs-node}}
`,
			check: func(t *testing.T, m *manifest) {
				m.get("CSIDriver", "ebs.csi.aws.com")
				plugin := container(m.node().Spec.Template.Spec, "diskplane")
				if !hasArg(plugin.Args, "--driver-name=ebs.csi.aws.com") || !hasArg(plugin.Args, "--endpoint=unix:///var/lib/kubelet/plugins/ebs.csi.aws.com/csi.sock") {
					t.Errorf("node args %v", plugin.Args)
				}
				text := strings.Join(policyExpressions(t, m.get("ValidatingAdmissionPolicy", "diskplane-node-startup-taint").Object), "\n")
				if !strings.Contains(text, `"ebs.csi.aws.com/agent-not-ready"`) || !strings.Contains(text, "system:serviceaccount:kube-system:ebs-node") {
					t.Errorf("policy does not follow the names:\n%s", text)
				}
				role := decode[rbacv1.ClusterRole](m, m.get("ClusterRole", "diskplane-node"))
				if !slices.ContainsFunc(role.Rules, func(r rbacv1.PolicyRule) bool {
					return slices.Equal(r.Resources, []string{"csidrivers"}) && slices.Equal(r.ResourceNames, []string{"ebs.csi.aws.com"})
				}) {
					t.Errorf("the node may not read its CSIDriver ebs.csi.aws.com: %+v", role.Rules)
				}
			},
		},
		{
			name:   "CSIDriver options",
			values: "csiDriver: {seLinuxMount: true, requiresRepublish: true, tokenRequests: [{audience: sts.amazonaws.com, expirationSeconds: 3600}]}\n",
			check: func(t *testing.T, m *manifest) {
				d := decode[storagev1.CSIDriver](m, m.get("CSIDriver", "ebs.csi.diskplane.io"))
				if d.Spec.SELinuxMount == nil || !*d.Spec.SELinuxMount || d.Spec.RequiresRepublish == nil || !*d.Spec.RequiresRepublish {
					t.Errorf("spec %+v", d.Spec)
				}
				if len(d.Spec.TokenRequests) != 1 || d.Spec.TokenRequests[0].Audience != "sts.amazonaws.com" || *d.Spec.TokenRequests[0].ExpirationSeconds != 3600 {
					t.Errorf("token requests %+v", d.Spec.TokenRequests)
				}
				if *d.Spec.FSGroupPolicy != storagev1.FileFSGroupPolicy || !*d.Spec.AttachRequired {
					t.Errorf("fixed fields changed: %+v", d.Spec)
				}
			},
		},
		{
			name: "storage classes",
			values: `
storageClasses:
  - name: gp3
    default: true
    parameters: {type: gp3, iops: 4000, encrypted: true}
  - name: io2-retain
    reclaimPolicy: Retain
    volumeBindingMode: Immediate
    allowVolumeExpansion: false
    parameters: {type: io2, iopsPerGB: "50"}
    mountOptions: [noatime]
    annotations: {team: db}
`,
			check: func(t *testing.T, m *manifest) {
				gp3 := decode[storagev1.StorageClass](m, m.get("StorageClass", "gp3"))
				if gp3.Annotations["storageclass.kubernetes.io/is-default-class"] != "true" || gp3.Provisioner != "ebs.csi.diskplane.io" {
					t.Errorf("gp3 %+v", gp3.ObjectMeta)
				}
				if gp3.Parameters["iops"] != "4000" || gp3.Parameters["encrypted"] != "true" {
					t.Errorf("gp3 parameters %v, want strings", gp3.Parameters)
				}
				if *gp3.ReclaimPolicy != corev1.PersistentVolumeReclaimDelete || *gp3.VolumeBindingMode != storagev1.VolumeBindingWaitForFirstConsumer || !*gp3.AllowVolumeExpansion {
					t.Errorf("gp3 defaults %+v", gp3)
				}
				io2 := decode[storagev1.StorageClass](m, m.get("StorageClass", "io2-retain"))
				if _, ok := io2.Annotations["storageclass.kubernetes.io/is-default-class"]; ok || io2.Annotations["team"] != "db" {
					t.Errorf("io2 annotations %v", io2.Annotations)
				}
				if *io2.ReclaimPolicy != corev1.PersistentVolumeReclaimRetain || *io2.VolumeBindingMode != storagev1.VolumeBindingImmediate || *io2.AllowVolumeExpansion || !slices.Equal(io2.MountOptions, []string{"noatime"}) {
					t.Errorf("io2 %+v", io2)
				}
			},
		},
		{
			name: "snapshot and attributes classes",
			values: `
volumeSnapshotClasses:
  - {name: snap, default: true, deletionPolicy: Retain, parameters: {tagSpecification_1: "team=db"}}
volumeAttributesClasses:
  - {name: fast, parameters: {type: io2, iops: 8000}}
`,
			check: func(t *testing.T, m *manifest) {
				vsc := m.get("VolumeSnapshotClass", "snap")
				if vsc.GetAPIVersion() != "snapshot.storage.k8s.io/v1" || vsc.Object["driver"] != "ebs.csi.diskplane.io" || vsc.Object["deletionPolicy"] != "Retain" ||
					vsc.GetAnnotations()["snapshot.storage.kubernetes.io/is-default-class"] != "true" {
					t.Errorf("VolumeSnapshotClass %v", vsc.Object)
				}
				vac := m.get("VolumeAttributesClass", "fast")
				params := vac.Object["parameters"].(map[string]any)
				if vac.Object["driverName"] != "ebs.csi.diskplane.io" || params["iops"] != "8000" || params["type"] != "io2" {
					t.Errorf("VolumeAttributesClass %v", vac.Object)
				}
				if v := vac.GetAPIVersion(); v != "storage.k8s.io/v1" {
					t.Errorf("VolumeAttributesClass %s on a current Kubernetes, want storage.k8s.io/v1", v)
				}
			},
		},
		{
			name:   "metrics off",
			values: "metrics: {services: false}\n",
			check: func(t *testing.T, m *manifest) {
				if len(m.ofKind("Service")) != 0 || len(m.ofKind("ServiceMonitor")) != 0 {
					t.Errorf("objects %v", m.names())
				}
			},
		},
		{
			name:   "service monitors",
			values: "metrics: {serviceMonitor: {enabled: true, interval: 15s, labels: {release: prom}}}\n",
			check: func(t *testing.T, m *manifest) {
				for _, c := range []string{"controller", "node"} {
					sm := m.get("ServiceMonitor", "diskplane-"+c)
					svc := m.get("Service", "diskplane-"+c+"-metrics")
					sel := sm.Object["spec"].(map[string]any)["selector"].(map[string]any)["matchLabels"].(map[string]any)
					for k, v := range sel {
						if svc.GetLabels()[k] != v {
							t.Errorf("ServiceMonitor %s selector %v does not select Service labels %v", c, sel, svc.GetLabels())
						}
					}
					if sm.GetLabels()["release"] != "prom" {
						t.Errorf("ServiceMonitor labels %v", sm.GetLabels())
					}
				}
			},
		},
		{
			name: "images, pull secrets and labels",
			values: `
image: {repository: registry.example.com/diskplane, tag: v9.9.9, pullPolicy: Always}
imagePullSecrets: [{name: regcred}]
customLabels: {owner: platform}
controller: {podLabels: {tier: storage}, podAnnotations: {note: "x"}}
`,
			check: func(t *testing.T, m *manifest) {
				for _, spec := range []corev1.PodSpec{m.controller().Spec.Template.Spec, m.node().Spec.Template.Spec} {
					plugin := container(spec, "diskplane")
					if plugin.Image != "registry.example.com/diskplane:v9.9.9" || plugin.ImagePullPolicy != corev1.PullAlways {
						t.Errorf("plugin image %s %s", plugin.Image, plugin.ImagePullPolicy)
					}
					if len(spec.ImagePullSecrets) != 1 || spec.ImagePullSecrets[0].Name != "regcred" {
						t.Errorf("pull secrets %v", spec.ImagePullSecrets)
					}
				}
				for _, o := range m.objects {
					if o.GetLabels()["owner"] != "platform" {
						t.Errorf("%s %s lacks the custom label", o.GetKind(), o.GetName())
					}
				}
				tpl := m.controller().Spec.Template
				if tpl.Labels["tier"] != "storage" || tpl.Annotations["note"] != "x" {
					t.Errorf("pod metadata %+v", tpl.ObjectMeta)
				}
			},
		},
		{
			name:   "image pinned by digest",
			values: "image: {repository: registry.example.com/diskplane, tag: v9.9.9, digest: \"sha256:" + strings.Repeat("0f", 32) + "\"}\n",
			check: func(t *testing.T, m *manifest) {
				want := "registry.example.com/diskplane@sha256:" + strings.Repeat("0f", 32)
				for _, spec := range []corev1.PodSpec{m.controller().Spec.Template.Spec, m.node().Spec.Template.Spec} {
					if plugin := container(spec, "diskplane"); plugin.Image != want {
						t.Errorf("plugin image %s, want %s (the digest wins over the tag)", plugin.Image, want)
					}
				}
			},
		},
		{
			name:   "existing service accounts",
			values: "controller: {serviceAccount: {create: false, name: byo-controller}}\nnode: {serviceAccount: {create: false, name: byo-node}}\n",
			check: func(t *testing.T, m *manifest) {
				if len(m.ofKind("ServiceAccount")) != 0 {
					t.Errorf("ServiceAccounts rendered: %v", m.names())
				}
				if m.controller().Spec.Template.Spec.ServiceAccountName != "byo-controller" || m.node().Spec.Template.Spec.ServiceAccountName != "byo-node" {
					t.Error("pods do not use the named accounts")
				}
				b := decode[rbacv1.ClusterRoleBinding](m, m.get("ClusterRoleBinding", "diskplane-provisioner"))
				if b.Subjects[0].Name != "byo-controller" {
					t.Errorf("binding subjects %+v", b.Subjects)
				}
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.check(t, render(t, tc.values))
		})
	}
}

// envIndex is the position of variable name in c.Env, or -1.
func envIndex(c *corev1.Container, name string) int {
	return slices.IndexFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == name })
}

// The local-cluster values file is a valid set of values and points the
// pods at the emulator on the node's address.
func TestLocalClusterValues(t *testing.T) {
	m := render(t, "", "--values", "../../hack/chart/values-local-cluster.yaml")
	plugin := container(m.controller().Spec.Template.Spec, "diskplane")
	if e := env(plugin, "AWS_ENDPOINT_URL_EC2"); e == nil || !strings.Contains(e.Value, "$(HOST_IP)") {
		t.Errorf("controller endpoint %+v", e)
	}
	if plugin.ImagePullPolicy != corev1.PullNever {
		t.Errorf("plugin pull policy %s", plugin.ImagePullPolicy)
	}
	for _, c := range m.controller().Spec.Template.Spec.Containers {
		if c.ImagePullPolicy != corev1.PullNever {
			t.Errorf("%s pull policy %s: the local cluster pulls nothing", c.Name, c.ImagePullPolicy)
		}
	}
	node := container(m.node().Spec.Template.Spec, "diskplane")
	if e := env(node, "AWS_EC2_METADATA_SERVICE_ENDPOINT"); e == nil || !strings.Contains(e.Value, "$(HOST_IP)") {
		t.Errorf("node IMDS endpoint %+v", e)
	}
	if !slices.Contains(node.Args, "--emulator-loop-devices") {
		t.Errorf("node args %v: the emulator attaches loop devices, which the plugin accepts only with --emulator-loop-devices", node.Args)
	}
	if defaults := container(render(t, "").node().Spec.Template.Spec, "diskplane"); slices.Contains(defaults.Args, "--emulator-loop-devices") {
		t.Error("the chart's defaults accept loop devices; only the emulator's users may")
	}

	// make demo installs these values, then a user applies the examples,
	// examples/dynamic-provisioning's StorageClass among them: kubectl apply
	// fails on a StorageClass whose immutable fields differ from the live one.
	raw, err := os.ReadFile("../../examples/dynamic-provisioning/storageclass.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var example storagev1.StorageClass
	if err := yaml.UnmarshalStrict(raw, &example); err != nil {
		t.Fatalf("examples/dynamic-provisioning/storageclass.yaml: %v", err)
	}
	chart := decode[storagev1.StorageClass](m, m.get("StorageClass", example.Name))
	if chart.Provisioner != example.Provisioner || !maps.Equal(chart.Parameters, example.Parameters) ||
		*chart.ReclaimPolicy != *example.ReclaimPolicy || *chart.VolumeBindingMode != *example.VolumeBindingMode {
		t.Errorf("StorageClass %s: the chart makes %s %v %s %s, the example %s %v %s %s; they must agree",
			example.Name, chart.Provisioner, chart.Parameters, *chart.ReclaimPolicy, *chart.VolumeBindingMode,
			example.Provisioner, example.Parameters, *example.ReclaimPolicy, *example.VolumeBindingMode)
	}
}
