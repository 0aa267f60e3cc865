# shellcheck shell=bash disable=SC2154 # lib.sh, sourced first, defines the lc_* paths
# A node's configuration: containerd, the CNI network, the kubelet and
# kube-proxy. Sourced after lib.sh by up.sh (the single node on the host) and
# worker.sh (each worker), so that every node is configured alike; the
# functions only write files.

# node_containerd_config FILE ROOT STATE SOCKET CNI_CONF_DIR writes a
# containerd configuration with its own root, state and socket, nothing
# shared with a containerd the machine may run. restrict_oom_score_adj: the
# kubelet asks for oom_score_adj -998 on sandboxes, which needs
# CAP_SYS_RESOURCE; without it runc init dies ("can't get final child's PID
# from pipe").
node_containerd_config() {
  local file=$1 root=$2 state=$3 socket=$4 cni_conf=$5
  cat >"$file" <<EOF
version = 2
root = "$root/root"
state = "$state"

[grpc]
  address = "$socket"

[ttrpc]
  address = "$socket.ttrpc"

[plugins."io.containerd.internal.v1.opt"]
  path = "$root/opt"

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "localhost/pause:local"
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = "$state/runc"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$cni_conf"
EOF
}

# node_cni_config DIR SUBNET writes the pod network: a bridge that is the
# pods' gateway and masquerades what leaves the subnet, host-local IPAM,
# portmap and loopback.
node_cni_config() {
  local dir=$1 subnet=$2
  cat >"$dir/10-$lc_cni_name.conflist" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "$lc_cni_name",
  "plugins": [
    {"type": "bridge", "bridge": "$lc_cni_bridge", "isGateway": true, "ipMasq": true, "hairpinMode": true,
     "ipam": {"type": "host-local", "ranges": [[{"subnet": "$subnet"}]], "routes": [{"dst": "0.0.0.0/0"}]}},
    {"type": "portmap", "capabilities": {"portMappings": true}},
    {"type": "loopback"}
  ]
}
EOF
}

# node_kubelet_config FILE ADDRESS PROVIDER_ID SOCKET [CGROUP_ROOT] writes the
# kubelet's configuration. cgroup v1 (this machine's hierarchy) needs
# failCgroupV1: false from Kubernetes 1.35 on; cgroupfs because there is no
# systemd. Image GC is off: nothing could pull an image it removed. The
# kubelet's API requires a client certificate from the CA (the apiserver has
# one) and asks the apiserver to authorize each request. CSIVolumeHealth
# (alpha) makes the kubelet report a CSI volume's abnormal condition as an
# event on its pod, and the volume stats it comes with are gathered every 15 s
# instead of 1 m, so that tests see a condition change within seconds. The
# kubelet syncs each running pod every 10 s instead of 1 m: that sync is when
# it finds a volume grown under a mounted pod and calls NodeExpandVolume, so
# an online expansion no longer waits up to a minute for it.
# CGROUP_ROOT (a worker's) puts the pods' cgroups below it.
node_kubelet_config() {
  local file=$1 address=$2 provider_id=$3 socket=$4 cgroup_root=${5:-}
  cat >"$file" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: $address
healthzBindAddress: 127.0.0.1
readOnlyPort: 0
providerID: $provider_id
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $lc_pki/ca.crt}
authorization: {mode: Webhook}
cgroupDriver: cgroupfs
failCgroupV1: false
containerRuntimeEndpoint: unix://$socket
failSwapOn: false
clusterDomain: cluster.local
resolvConf: /etc/resolv.conf
evictionHard: {memory.available: "100Mi", nodefs.available: "1%", nodefs.inodesFree: "1%", imagefs.available: "1%"}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
serializeImagePulls: false
featureGates: {CSIVolumeHealth: true}
volumeStatsAggPeriod: 15s
syncFrequency: 10s
EOF
  [[ -z $cgroup_root ]] || echo "cgroupRoot: $cgroup_root" >>"$file"
}

# node_labels ZONE REGION INSTANCE_TYPE [ZONE_ID] prints the kubelet's
# --node-labels value: the labels an EC2 node carries.
node_labels() {
  local labels="topology.kubernetes.io/zone=$1,topology.kubernetes.io/region=$2,node.kubernetes.io/instance-type=$3"
  [[ -z ${4:-} ]] || labels+=",topology.k8s.aws/zone-id=$4"
  echo "$labels"
}

# node_kube_proxy_config FILE KUBECONFIG NODE_NAME writes kube-proxy's
# configuration: iptables mode, told to leave the machine's conntrack and
# route_localnet settings alone.
node_kube_proxy_config() {
  local file=$1 kubeconfig=$2 node_name=$3
  cat >"$file" <<EOF
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection: {kubeconfig: $kubeconfig}
hostnameOverride: $node_name
mode: iptables
clusterCIDR: ${lc_pod_cidr%/*}/16
bindAddress: 127.0.0.1
metricsBindAddress: 127.0.0.1:10249
healthzBindAddress: 127.0.0.1:10256
iptables: {localhostNodePorts: false}
conntrack: {maxPerCore: 0, min: 0, tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 0s}
EOF
}
