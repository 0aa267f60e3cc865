#!/usr/bin/env bash
# Brings up a single-node Kubernetes cluster as plain host processes (or, with
# WORKERS=N, a control plane whose N nodes worker.sh runs in namespaces): etcd,
# containerd, kube-apiserver, kube-controller-manager, kube-scheduler, kubelet,
# kube-proxy, a CNI bridge, the VolumeSnapshot CRDs and snapshot-controller.
# Uses what build.sh built; pulls nothing. Needs root. down.sh undoes it.
#
# The node poses as an EC2 instance, so that the Node object agrees with the
# instance the EC2 emulator's IMDS describes:
#   INSTANCE_ID    (i-0123456789abcdef0)  -> spec.providerID aws:///ZONE/INSTANCE_ID
#   ZONE           (us-east-1a)           -> topology.kubernetes.io/zone
#   REGION         (ZONE minus its letter) -> topology.kubernetes.io/region
#   INSTANCE_TYPE  (m5.large)             -> node.kubernetes.io/instance-type
#   ZONE_ID        (unset)                -> topology.k8s.aws/zone-id, when set
# Several nodes:
#   WORKERS        (unset or 0) N >= 1: the host runs only the control plane
#                  (etcd, kube-apiserver, kube-controller-manager,
#                  kube-scheduler, snapshot-controller) and worker.sh starts
#                  nodes worker-1..worker-N, each with its own containerd,
#                  kubelet and kube-proxy in namespaces of its own; worker.sh
#                  reads WORKER_ZONES, WORKER_INSTANCE_TYPE and NODE_TAINTS
#                  (INSTANCE_ID, ZONE, ZONE_ID and NODE_NAME are then unused)
# Other settings:
#   NODE_NAME      (hostname)   the Node's name
#   NODE_IP        (the address of the default route's interface) the Node's
#                  InternalIP, and the address the apiserver advertises
#   ETCD           (/usr/bin/etcd) the etcd binary to run
#   NODE_TAINTS    (unset) taints the kubelet registers the Node with
#                  (--register-with-taints, key[=value]:Effect,...), e.g. a CSI
#                  driver's startup taint ebs.csi.diskplane.io/agent-not-ready:NoExecute
#   LOCAL_CLUSTER_DIR           see lib.sh
#
# On success it prints the KUBECONFIG to use. Running it again while the
# cluster is up only prints that again.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
source "$lc_here/machine.sh"
source "$lc_here/node.sh"
lc_require_root up.sh

INSTANCE_ID=${INSTANCE_ID:-i-0123456789abcdef0}
ZONE=${ZONE:-us-east-1a}
REGION=${REGION:-${ZONE%[a-z]}}
INSTANCE_TYPE=${INSTANCE_TYPE:-m5.large}
ZONE_ID=${ZONE_ID:-}
NODE_NAME=${NODE_NAME:-$(hostname | tr '[:upper:]' '[:lower:]')}
NODE_IP=${NODE_IP:-$(ip -4 route get 1.1.1.1 2>/dev/null | sed -nE 's/.* src ([0-9.]+).*/\1/p')}
ETCD=${ETCD:-/usr/bin/etcd}
NODE_TAINTS=${NODE_TAINTS:-}
WORKERS=${WORKERS:-0}
[[ $INSTANCE_ID =~ ^i-[0-9a-f]{8}([0-9a-f]{9})?$ ]] || lc_die "INSTANCE_ID $INSTANCE_ID is not an EC2 instance ID"
# The kubelet refuses a loopback node IP.
[[ -n $NODE_IP && $NODE_IP != 127.* ]] || lc_die "no default route to take the node IP from; set NODE_IP to a non-loopback address of this machine"
[[ $ZONE =~ ^[a-z]{2}(-[a-z]+)+-[0-9]+[a-z]$ ]] || lc_die "ZONE $ZONE is not an availability zone name"
if ! [[ $WORKERS =~ ^[0-9]+$ ]] || ((WORKERS > lc_max_workers)); then
  lc_die "WORKERS=$WORKERS: expected a number from 0 to $lc_max_workers"
fi

# What this run starts on the host, and what runs already: the same means the
# cluster is up; anything else left running (or a worker left killed) needs
# down.sh first.
host_node=(containerd kubelet kube-proxy)
control_plane=(etcd kube-apiserver kube-controller-manager kube-scheduler snapshot-controller)
components=("${control_plane[@]}")
((WORKERS)) || components=("${host_node[@]}" "${control_plane[@]}")
running=()
for c in "${host_node[@]}" "${control_plane[@]}"; do lc_pid_alive "$c" && running+=("$c"); done
for k in $(lc_worker_ids); do
  if lc_worker_init_pid "$k" >/dev/null; then running+=("worker-$k"); else running+=("worker-$k(killed)"); fi
done
wanted=("${components[@]}")
for ((k = 1; k <= WORKERS; k++)); do wanted+=("worker-$k"); done
if [[ ${running[*]} == "${wanted[*]}" ]]; then
  lc_log "the local cluster is already up"
  echo "export KUBECONFIG=$lc_kubeconfig"
  exit 0
fi
((${#running[@]} == 0)) || lc_die "the local cluster runs ${running[*]}, not what this run starts (${wanted[*]}); run hack/local-cluster/down.sh first"

for b in kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy kubectl snapshot-controller pause; do
  [[ -x $lc_bin/$b ]] || lc_die "$lc_bin/$b is missing; run hack/local-cluster/build.sh first"
done
for f in busybox.tar pause.tar; do
  [[ -f $lc_images/$f ]] || lc_die "$lc_images/$f is missing; run hack/local-cluster/build.sh first"
done
for t in "$ETCD" containerd containerd-shim-runc-v2 runc ctr iptables openssl /usr/lib/cni/bridge nsenter unshare; do
  command -v "$t" >/dev/null || lc_die "$t is missing; run hack/install-deps.sh cluster"
done
ports=(2379 2380 6443 10257 10259)
((WORKERS)) || ports+=(10248 10249 10250 10256)
for port in "${ports[@]}"; do
  ! ss -Hltn "sport = :$port" | grep -q . || lc_die "port $port is already in use: is another cluster running?"
done
if [[ -e $lc_kubelet_dir && ! -e $lc_kubelet_dir/$lc_marker ]]; then
  lc_die "$lc_kubelet_dir exists and was not made by this script: another kubelet's data? not touching it"
fi

export PATH=$lc_bin:$PATH
start=$SECONDS
trap 'echo "up.sh failed; logs are in $lc_logs; hack/local-cluster/down.sh removes what was started" >&2' ERR
# Before anything changes the machine: what down.sh must restore.
machine_record_baseline
rm -rf "$lc_logs"
mkdir -p "$lc_logs" "$lc_pids" "$lc_pki" "$lc_state" "$lc_kubelet_dir"
echo "$LOCAL_CLUSTER_DIR" >"$lc_kubelet_dir/$lc_marker"

# --- PKI: a CA, the apiserver's serving certificate, one system:masters
# client certificate that every component and sidecar uses (RBAC is still on
# for everything else), and the service-account signing key.
make_pki() {
  local d=$lc_pki
  rm -f "$d"/*
  openssl req -x509 -newkey rsa:2048 -nodes -keyout "$d/ca.key" -out "$d/ca.crt" \
    -subj /CN=diskplane-local-ca -days 3650 2>/dev/null
  openssl req -newkey rsa:2048 -nodes -keyout "$d/apiserver.key" -out "$d/apiserver.csr" \
    -subj /CN=kube-apiserver 2>/dev/null
  printf 'subjectAltName=%s\nextendedKeyUsage=serverAuth\n' \
    "DNS:localhost,DNS:$NODE_NAME,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local,IP:127.0.0.1,IP:$NODE_IP,IP:10.96.0.1" \
    >"$d/apiserver.ext"
  openssl x509 -req -in "$d/apiserver.csr" -CA "$d/ca.crt" -CAkey "$d/ca.key" -CAcreateserial \
    -days 3650 -extfile "$d/apiserver.ext" -out "$d/apiserver.crt" 2>/dev/null
  openssl req -newkey rsa:2048 -nodes -keyout "$d/admin.key" -out "$d/admin.csr" \
    -subj "/O=system:masters/CN=local-cluster-admin" 2>/dev/null
  printf 'extendedKeyUsage=clientAuth\n' >"$d/client.ext"
  openssl x509 -req -in "$d/admin.csr" -CA "$d/ca.crt" -CAkey "$d/ca.key" -CAcreateserial \
    -days 3650 -extfile "$d/client.ext" -out "$d/admin.crt" 2>/dev/null
  # The front proxy's CA and client: how the apiserver authenticates itself
  # to aggregated APIs, and what the controller-manager and scheduler read
  # from the extension-apiserver-authentication ConfigMap.
  openssl req -x509 -newkey rsa:2048 -nodes -keyout "$d/front-proxy-ca.key" -out "$d/front-proxy-ca.crt" \
    -subj /CN=diskplane-local-front-proxy-ca -days 3650 2>/dev/null
  openssl req -newkey rsa:2048 -nodes -keyout "$d/front-proxy-client.key" -out "$d/front-proxy-client.csr" \
    -subj /CN=front-proxy-client 2>/dev/null
  openssl x509 -req -in "$d/front-proxy-client.csr" -CA "$d/front-proxy-ca.crt" -CAkey "$d/front-proxy-ca.key" \
    -CAcreateserial -days 3650 -extfile "$d/client.ext" -out "$d/front-proxy-client.crt" 2>/dev/null
  openssl genrsa -out "$d/sa.key" 2048 2>/dev/null
  openssl rsa -in "$d/sa.key" -pubout -out "$d/sa.pub" 2>/dev/null
  local kc=(kubectl --kubeconfig="$lc_kubeconfig" config)
  "${kc[@]}" set-cluster local --server=https://127.0.0.1:6443 --certificate-authority="$d/ca.crt" --embed-certs >/dev/null
  "${kc[@]}" set-credentials admin --client-certificate="$d/admin.crt" --client-key="$d/admin.key" --embed-certs >/dev/null
  "${kc[@]}" set-context local --cluster=local --user=admin >/dev/null
  "${kc[@]}" use-context local >/dev/null
  chmod 600 "$d"/*.key "$lc_kubeconfig"
}
make_pki
lc_log "PKI and kubeconfig written"

# --- containerd (the single node's): its own root, state and socket; the
# images build.sh made are imported, nothing is pulled.
start_host_containerd() {
  mkdir -p "$lc_run/containerd" "$lc_run/cni"
  node_containerd_config "$lc_run/containerd/config.toml" "$lc_run/containerd" "$lc_state" \
    "$lc_containerd_sock" "$lc_run/cni"
  node_cni_config "$lc_run/cni" "$lc_pod_cidr"
  lc_start containerd containerd --config "$lc_run/containerd/config.toml"
  lc_wait "containerd ready" 30 ctr --address "$lc_containerd_sock" version
  lc_import_images "$lc_containerd_sock"
}
((WORKERS)) || start_host_containerd

# --- etcd and the control plane
lc_start etcd "$ETCD" --name local --data-dir "$lc_run/etcd" \
  --listen-client-urls http://127.0.0.1:2379 --advertise-client-urls http://127.0.0.1:2379 \
  --listen-peer-urls http://127.0.0.1:2380 --initial-advertise-peer-urls http://127.0.0.1:2380 \
  --initial-cluster local=http://127.0.0.1:2380 --unsafe-no-fsync
# The apiserver listens on every address so that pods reach it through the
# kubernetes Service (node IP); clients must present a certificate signed by
# the CA, and RBAC applies to everyone but system:masters.
lc_start kube-apiserver kube-apiserver --etcd-servers=http://127.0.0.1:2379 \
  --bind-address=0.0.0.0 --advertise-address="$NODE_IP" --secure-port=6443 \
  --tls-cert-file="$lc_pki/apiserver.crt" --tls-private-key-file="$lc_pki/apiserver.key" \
  --client-ca-file="$lc_pki/ca.crt" \
  --kubelet-client-certificate="$lc_pki/admin.crt" --kubelet-client-key="$lc_pki/admin.key" \
  --kubelet-preferred-address-types=InternalIP,Hostname \
  --authorization-mode=Node,RBAC --allow-privileged=true \
  --service-cluster-ip-range="$lc_service_cidr" \
  --service-account-issuer=https://kubernetes.default.svc.cluster.local \
  --service-account-key-file="$lc_pki/sa.pub" --service-account-signing-key-file="$lc_pki/sa.key" \
  --requestheader-client-ca-file="$lc_pki/front-proxy-ca.crt" --requestheader-allowed-names=front-proxy-client \
  --requestheader-username-headers=X-Remote-User --requestheader-group-headers=X-Remote-Group \
  --requestheader-extra-headers-prefix=X-Remote-Extra- \
  --proxy-client-cert-file="$lc_pki/front-proxy-client.crt" --proxy-client-key-file="$lc_pki/front-proxy-client.key"
lc_wait "kube-apiserver ready" 120 lc_kubectl get --raw /readyz

component_flags=(--kubeconfig="$lc_kubeconfig" --authentication-kubeconfig="$lc_kubeconfig"
  --authorization-kubeconfig="$lc_kubeconfig" --bind-address=127.0.0.1 --leader-elect=false)
lc_start kube-controller-manager kube-controller-manager "${component_flags[@]}" \
  --service-account-private-key-file="$lc_pki/sa.key" --root-ca-file="$lc_pki/ca.crt" \
  --use-service-account-credentials=true \
  --cluster-signing-cert-file="$lc_pki/ca.crt" --cluster-signing-key-file="$lc_pki/ca.key"
lc_start kube-scheduler kube-scheduler "${component_flags[@]}"

# --- the single node: kubelet and kube-proxy on the host (node.sh writes
# their configuration).
start_host_node() {
  node_kubelet_config "$lc_run/kubelet.yaml" "$NODE_IP" "aws:///$ZONE/$INSTANCE_ID" "$lc_containerd_sock"
  local taints=()
  [[ -z $NODE_TAINTS ]] || taints=(--register-with-taints="$NODE_TAINTS")
  lc_start kubelet kubelet --config="$lc_run/kubelet.yaml" --kubeconfig="$lc_kubeconfig" \
    --root-dir="$lc_kubelet_dir" --hostname-override="$NODE_NAME" --node-ip="$NODE_IP" \
    --node-labels="$(node_labels "$ZONE" "$REGION" "$INSTANCE_TYPE" "$ZONE_ID")" "${taints[@]}"
  node_kube_proxy_config "$lc_run/kube-proxy.yaml" "$lc_kubeconfig" "$NODE_NAME"
  lc_start kube-proxy kube-proxy --config="$lc_run/kube-proxy.yaml"
}
((WORKERS)) || start_host_node

# --- VolumeSnapshot CRDs (from the pinned client/v8 module) and the
# snapshot-controller that serves them
lc_kubectl apply -f "$lc_crds" >/dev/null
lc_wait "VolumeSnapshot CRDs established" 60 lc_kubectl wait --for=condition=Established --timeout=2s \
  crd/volumesnapshots.snapshot.storage.k8s.io crd/volumesnapshotcontents.snapshot.storage.k8s.io \
  crd/volumesnapshotclasses.snapshot.storage.k8s.io
# Only the three VolumeSnapshot CRDs are installed: group snapshots stay off.
lc_start snapshot-controller snapshot-controller --kubeconfig="$lc_kubeconfig" --leader-election=false \
  --feature-gates=CSIVolumeGroupSnapshot=false

# --- the nodes: the host's, or the workers (worker.sh waits until they are Ready)
if ((WORKERS)); then
  "$lc_here/worker.sh" up $(seq "$WORKERS")
else
  lc_wait "node $NODE_NAME Ready" 120 lc_kubectl wait --for=condition=Ready "node/$NODE_NAME" --timeout=2s
fi
lc_wait "default service account" 60 lc_kubectl get serviceaccount default
for c in "${components[@]}"; do lc_pid_alive "$c" || lc_die "$c exited; see $lc_logs/$c.log"; done
lc_log "local cluster up in $((SECONDS - start))s; logs in $lc_logs"
lc_kubectl get nodes -o wide
echo "export KUBECONFIG=$lc_kubeconfig PATH=$lc_bin:\$PATH"
