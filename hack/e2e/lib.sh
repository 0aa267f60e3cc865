# shellcheck shell=bash disable=SC2034 # the scripts that source this use the settings
# Shared by hack/e2e/*.sh (make demo, make e2e, make e2e-external): Diskplane
# and the EC2 emulator running in the local cluster of hack/local-cluster.
# Source it; it defines settings and functions and starts nothing.
#
# The cluster's node poses as the emulator's local instance: the same
# INSTANCE_ID, INSTANCE_TYPE and ZONE go to hack/local-cluster/up.sh (the
# Node's providerID and labels) and to the emulator (its IMDS and
# DescribeInstances), so the driver's node ID, topology and the Node agree.
#
# Settings (environment):
#   INSTANCE_ID, INSTANCE_TYPE, ZONE, REGION   the node / local instance
#                                   (defaults as in hack/local-cluster/up.sh)
#   DRIVER_NAME      (ebs.csi.diskplane.io) the CSI driver name
#   EMULATOR_ARGS    extra ec2-emulator flags (word-split), e.g.
#                    "--volume-create-latency=5s"
#   PLUGIN_ARGS      extra diskplane flags (word-split)
#   E2E_EMULATOR_LISTEN  (127.0.0.1) the address the emulator's EC2 and IMDS
#                    listeners bind; 0.0.0.0 lets pods reach them on the node's
#                    address (hack/e2e/incluster.sh). The admin API stays on
#                    127.0.0.1, and so do the host-process driver's endpoints.
#   E2E_DEVICE_LINK_DIR  (run/emulator/by-id) where the emulator makes the
#                    by-id links of attached volumes; an in-cluster node plugin
#                    sees only the host's /dev and kubelet dir, so
#                    hack/e2e/incluster.sh puts them below /dev. The emulator
#                    records its choice: later scripts use the running one's.
#   NODES            (1) the cluster's nodes: 1 is the single node on the
#                    host; N > 1 is a control plane on the host and N
#                    workers (hack/local-cluster WORKERS=N), each worker an
#                    instance of the emulator that sees only its own volumes
#                    (make demo NODES=3, make e2e-multinode)
#   E2E_NODE_LINK_DIR  (/dev/diskplane-e2e-by-id) in a multi-node cluster,
#                    the by-id directory inside each worker's /dev where the
#                    emulator links the volumes attached to that worker
#   LOCAL_CLUSTER_DIR                          see hack/local-cluster/lib.sh

e2e_here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
source "$e2e_here/../local-cluster/lib.sh"

export INSTANCE_ID=${INSTANCE_ID:-i-0123456789abcdef0}
export INSTANCE_TYPE=${INSTANCE_TYPE:-m5.large}
export ZONE=${ZONE:-us-east-1a}
export REGION=${REGION:-${ZONE%[a-z]}}
export DRIVER_NAME=${DRIVER_NAME:-ebs.csi.diskplane.io}

e2e_diskplane=$lc_repo/_output/bin/diskplane
e2e_emulator=$lc_repo/_output/bin/ec2-emulator
# The emulator keeps its state, volume images and by-id links below the
# cluster's run directory, so hack/local-cluster/down.sh also finds loop
# devices a crashed run left behind.
e2e_emulator_dir=$lc_run/emulator
# The link dir the running (or last) emulator was started with, as
# e2e_emulator_up recorded it, so that the driver and down.sh look where the
# links are whatever the caller's environment says.
e2e_links_record=$e2e_emulator_dir/device-link-dir
if [[ -f $e2e_links_record ]]; then
  e2e_links=$(<"$e2e_links_record")
else
  e2e_links=${E2E_DEVICE_LINK_DIR:-$e2e_emulator_dir/by-id}
fi
e2e_listen_host=${E2E_EMULATOR_LISTEN:-127.0.0.1}
e2e_ec2_listen=127.0.0.1:8700
e2e_imds_listen=127.0.0.1:8701
e2e_admin_listen=127.0.0.1:8702
e2e_socket=$lc_kubelet_dir/plugins/$DRIVER_NAME/csi.sock
export NODES=${NODES:-1}
[[ $NODES =~ ^[1-9][0-9]*$ ]] || lc_die "NODES=$NODES: want a number of nodes, 1 or more"
e2e_node_links=${E2E_NODE_LINK_DIR:-/dev/diskplane-e2e-by-id}
# Pods on the workers of a multi-node cluster reach the host's processes (the
# emulator) at the workers' bridge, not at their node's address.
e2e_worker_gateway=$lc_worker_net.1

# The SDK's standard settings point the driver at the emulator; there is no
# emulator-specific code path in Diskplane. Its EC2 checks no signature, so
# the credentials are placeholders; its KMS checks them against the access
# keys a test declares (tests/e2e TestWorkloadIdentity declares these).
export AWS_ENDPOINT_URL_EC2=http://$e2e_ec2_listen
export AWS_ENDPOINT_URL_STS=http://$e2e_ec2_listen AWS_ENDPOINT_URL_KMS=http://$e2e_ec2_listen
export AWS_EC2_METADATA_SERVICE_ENDPOINT=http://$e2e_imds_listen
export AWS_REGION=$REGION
export AWS_ACCESS_KEY_ID=local AWS_SECRET_ACCESS_KEY=local

# The resizer passes the PVC and PV names to ControllerModifyVolume, as the
# Helm chart configures it, so VolumeAttributesClass tag templates work.
export RESIZER_ARGS=${RESIZER_ARGS:---extra-modify-metadata}

# e2e_multinode succeeds when the local cluster has workers (WORKERS=N up.sh).
e2e_multinode() { [[ -s $lc_workers_tsv ]]; }

# e2e_cluster_up brings up the local cluster unless it runs already: NODES
# workers when NODES > 1, else the single node. A cluster that is up with
# another shape must go first.
e2e_cluster_up() {
  if lc_pid_alive kube-apiserver; then
    local workers=0
    e2e_multinode && workers=$(grep -vc '^#' "$lc_workers_tsv")
    ((NODES == 1 && workers == 0 || NODES > 1 && workers == NODES)) ||
      lc_die "the local cluster is up with $workers workers, NODES=$NODES asks for another; run make demo-down first"
  fi
  if ((NODES > 1)); then
    WORKERS=$NODES "$lc_here/up.sh" >/dev/null
  else
    "$lc_here/up.sh" >/dev/null
  fi
}

# e2e_instance_flags prints the emulator's --instance flags, one per line:
# the single node's local instance, or one instance per worker of a
# multi-node cluster with its view (its address, by-id directory and devices
# cgroup, from hack/local-cluster's run/workers.tsv).
e2e_instance_flags() {
  if ! e2e_multinode; then
    echo "--instance=id=$INSTANCE_ID,type=$INSTANCE_TYPE,zone=$ZONE,local"
    return
  fi
  local name ip zone id type dev cgroup rest
  while IFS=$'\t' read -r name ip zone id type dev cgroup rest; do
    [[ -z $name || $name == \#* ]] && continue
    echo "--instance=id=$id,type=$type,zone=$zone,ip=$ip,links=$dev/${e2e_node_links#/dev/},devices-cgroup=$cgroup"
  done <"$lc_workers_tsv"
}

e2e_emulator_healthy() { curl -fsS "http://$e2e_admin_listen/healthz" >/dev/null 2>&1; }

# e2e_emulator_up starts the EC2 emulator as a host process recorded in the
# cluster's run/pids (so hack/local-cluster/down.sh stops it too), playing
# the node's instance, unless it runs already.
e2e_emulator_up() {
  if lc_pid_alive emulator; then
    e2e_emulator_healthy || lc_die "the emulator runs but does not answer on $e2e_admin_listen; see $lc_logs/emulator.log"
    return 0
  fi
  local port
  for port in ${e2e_ec2_listen##*:} ${e2e_imds_listen##*:} ${e2e_admin_listen##*:}; do
    ! ss -Hltn "sport = :$port" | grep -q . || lc_die "port $port is taken: is another ec2-emulator running?"
  done
  local extra=() instances=()
  read -r -a extra <<<"${EMULATOR_ARGS:-}"
  mapfile -t instances < <(e2e_instance_flags)
  mkdir -p "$e2e_emulator_dir"
  echo "$e2e_links" >"$e2e_links_record"
  lc_start emulator "$e2e_emulator" --data-dir="$e2e_emulator_dir" --device-link-dir="$e2e_links" \
    --listen="$e2e_listen_host:${e2e_ec2_listen##*:}" --imds-listen="$e2e_listen_host:${e2e_imds_listen##*:}" \
    --admin-listen="$e2e_admin_listen" \
    --region="$REGION" "${instances[@]}" -v=2 "${extra[@]}"
  lc_wait "ec2-emulator ready" 30 e2e_emulator_healthy ||
    lc_die "the emulator did not start; see $lc_logs/emulator.log"
}

# e2e_installed prints Diskplane's workloads installed in the cluster (make
# demo, make e2e-helm, make e2e-kustomize), space-separated; nothing when it
# is not installed.
e2e_installed() {
  local installed
  installed=$(lc_kubectl get daemonsets,deployments --all-namespaces -l app.kubernetes.io/name=diskplane -o name) ||
    lc_die "cannot list the cluster's workloads"
  echo "${installed//$'\n'/ }"
}

# e2e_require_not_installed fails when Diskplane is installed in the cluster:
# a host-process plugin would register the same driver with the kubelet
# beside it, and a fresh install would find the old one's objects.
e2e_require_not_installed() {
  local installed
  installed=$(e2e_installed)
  [[ -z $installed ]] || lc_die "Diskplane is installed in the cluster ($installed); run make demo-down first"
}

# e2e_driver_stale succeeds when the running plugin's binary was replaced
# since it started (make build ran again): it must be restarted to test the
# new code.
e2e_driver_stale() {
  local pid exe
  read -r pid exe <"$lc_pids/driver-plugin.pid"
  [[ $(readlink "/proc/$pid/exe" 2>/dev/null) == "$exe (deleted)" ]]
}

# e2e_driver_up starts Diskplane (all mode: controller and node in one
# process, registered with the kubelet) and the CSI sidecars, unless they run
# already with the current binary. The emulator's reads lag only while a
# test arms its eventual-consistency fault, for seconds: --visibility-timeout
# is 20 s, not EC2's two minutes (values-local-cluster.yaml says more).
e2e_driver_up() {
  if lc_pid_alive driver-plugin; then
    if ! e2e_driver_stale; then
      local s missing=0
      for s in csi-provisioner csi-attacher csi-resizer csi-snapshotter; do
        lc_pid_alive "driver-$s" || missing=1
      done
      ((missing == 0)) && return 0
    fi
    lc_log "restarting the driver (rebuilt binary or a sidecar stopped)"
    e2e_driver_down
  fi
  local extra=()
  read -r -a extra <<<"${PLUGIN_ARGS:-}"
  "$lc_here/driver.sh" up "$e2e_diskplane" --mode=all --driver-name="$DRIVER_NAME" \
    --endpoint="unix://$e2e_socket" --kubelet-registration-path="$e2e_socket" \
    --device-link-dir="$e2e_links" --emulator-loop-devices --kubeconfig="$lc_kubeconfig" --visibility-timeout=20s -v=4 "${extra[@]}"
  lc_wait "driver $DRIVER_NAME registered on the node" 60 e2e_driver_registered ||
    lc_die "the kubelet did not register $DRIVER_NAME; see $lc_logs/driver-plugin.log"
}

e2e_driver_down() {
  "$lc_here/driver.sh" down
}

# e2e_driver_registered succeeds once every node's CSINode lists the driver.
e2e_driver_registered() {
  local nodes registered
  nodes=$(lc_kubectl get nodes -o name | wc -l)
  registered=$(lc_kubectl get csinode -o jsonpath='{range .items[*]}{.spec.drivers[*].name}{"\n"}{end}' | grep -cw "$DRIVER_NAME")
  ((nodes > 0 && registered == nodes))
}

# e2e_require_binaries fails with the command to run when make build's
# output is missing.
e2e_require_binaries() {
  [[ -x $e2e_diskplane && -x $e2e_emulator ]] || lc_die "_output/bin/diskplane or ec2-emulator is missing; run make build"
}
