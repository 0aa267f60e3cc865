#!/usr/bin/env bash
# Runs a CSI driver in the local cluster as host processes: the plugin binary
# plus the sidecars a controller needs (external-provisioner, -attacher,
# -resizer, csi-snapshotter), all talking to the plugin's socket
# /var/lib/kubelet/plugins/<DRIVER_NAME>/csi.sock with the cluster's admin
# kubeconfig. The plugin registers itself with the kubelet (there is no
# node-driver-registrar here).
#
#   hack/local-cluster/driver.sh up [PLUGIN [ARG...]]
#       Starts PLUGIN with ARGs passed through unchanged (default:
#       _output/bin/diskplane --mode=all --driver-name=DRIVER_NAME
#       --endpoint=unix://SOCKET --kubelet-registration-path=SOCKET, which
#       registers the node plugin with the kubelet). Its environment is passed on too, e.g.
#       AWS_ENDPOINT_URL_EC2 and AWS_EC2_METADATA_SERVICE_ENDPOINT for the
#       EC2 emulator. Waits for the socket, starts the sidecars, and waits
#       until each has connected to the plugin (read the driver's name) or
#       exited. Fails, naming the log to read, if any process exited.
#   hack/local-cluster/driver.sh down
#       Stops the sidecars, then the plugin (checking each recorded PID's
#       binary before signalling), and deletes the CSIDriver object if up
#       created it. Safe to run twice.
#   hack/local-cluster/driver.sh status
#       Shows which of the processes run, and whether the kubelet lists the
#       driver in the node's CSINode.
#
# Environment:
#   DRIVER_NAME        (ebs.csi.diskplane.io) the CSI driver name
#   PROVISIONER_ARGS, ATTACHER_ARGS, RESIZER_ARGS, SNAPSHOTTER_ARGS
#                      extra flags for that sidecar (word-split)
#   CONNECT_TIMEOUT    (60) seconds to wait for the socket and for each sidecar
set -euo pipefail
source "$(dirname "$0")/lib.sh"

DRIVER_NAME=${DRIVER_NAME:-ebs.csi.diskplane.io}
CONNECT_TIMEOUT=${CONNECT_TIMEOUT:-60}
socket=$lc_kubelet_dir/plugins/$DRIVER_NAME/csi.sock
sidecars=(csi-provisioner csi-attacher csi-resizer csi-snapshotter)
managed_label=app.kubernetes.io/managed-by=diskplane-local-cluster

# Process names in run/pids; the "driver-" prefix is how down.sh tells them
# from the cluster's own processes (and stops them first).
pid_name() { echo "driver-$1"; }

# sidecar_args NAME sets args to the flags for sidecar NAME: the socket, the
# admin kubeconfig, no leader election (one replica), the driver's name in
# the logs (-v=2), and what the Diskplane chart sets for each sidecar; then
# the words of that sidecar's *_ARGS variable.
sidecar_args() {
  local extra=()
  args=(--csi-address="$socket" --kubeconfig="$lc_kubeconfig" --leader-election=false --v=2 --timeout=60s)
  case $1 in
    csi-provisioner)
      args+=(--extra-create-metadata --feature-gates=Topology=true --default-fstype=ext4)
      read -r -a extra <<<"${PROVISIONER_ARGS:-}"
      ;;
    csi-attacher) read -r -a extra <<<"${ATTACHER_ARGS:-}" ;;
    csi-resizer)
      args+=(--handle-volume-inuse-error=false)
      read -r -a extra <<<"${RESIZER_ARGS:-}"
      ;;
    csi-snapshotter)
      args+=(--extra-create-metadata)
      read -r -a extra <<<"${SNAPSHOTTER_ARGS:-}"
      ;;
  esac
  args+=("${extra[@]}")
}

# connected NAME succeeds once the sidecar logged the driver name it read from
# the plugin's GetPluginInfo: it reached the socket and the plugin answered.
connected() {
  grep -qE 'Detected CSI driver|CSI driver name' "$lc_logs/$(pid_name "$1").log" 2>/dev/null
}

# settled NAME succeeds once NAME needs no more waiting for: the plugin serves
# its socket, a sidecar has connected; or the process exited.
settled() {
  lc_pid_alive "$(pid_name "$1")" || return 0
  if [[ $1 == plugin ]]; then [[ -S $socket ]]; else connected "$1"; fi
}

# The CSIDriver object a Helm install would create; made only when missing,
# and labelled so that `down` deletes only its own.
ensure_csidriver() {
  lc_kubectl get csidriver "$DRIVER_NAME" >/dev/null 2>&1 && return 0
  lc_kubectl apply -f - >/dev/null <<EOF
apiVersion: storage.k8s.io/v1
kind: CSIDriver
metadata:
  name: $DRIVER_NAME
  labels: {${managed_label%=*}: ${managed_label#*=}}
spec:
  attachRequired: true
  podInfoOnMount: false
  fsGroupPolicy: File
EOF
  lc_log "created CSIDriver $DRIVER_NAME"
}

cmd_up() {
  lc_require_root "driver.sh up"
  lc_pid_alive kube-apiserver || lc_die "the local cluster is not up; run hack/local-cluster/up.sh first"
  local name
  for name in plugin "${sidecars[@]}"; do
    lc_pid_alive "$(pid_name "$name")" && lc_die "$name already runs; run driver.sh down first"
  done
  for name in "${sidecars[@]}"; do
    [[ -x $lc_bin/$name ]] || lc_die "$lc_bin/$name is missing; run hack/local-cluster/build.sh sidecars"
  done
  local plugin=("$@")
  if ((${#plugin[@]} == 0)); then
    plugin=("$lc_repo/_output/bin/diskplane" --mode=all --driver-name="$DRIVER_NAME" --endpoint="unix://$socket"
      --kubelet-registration-path="$socket")
  fi
  [[ -x ${plugin[0]} ]] || lc_die "${plugin[0]} is not an executable (make build builds _output/bin/diskplane)"

  ensure_csidriver
  mkdir -p "$(dirname "$socket")"
  rm -f "$socket"
  lc_start "$(pid_name plugin)" "${plugin[@]}"
  lc_wait "plugin serving $socket" "$CONNECT_TIMEOUT" settled plugin || true
  lc_pid_alive "$(pid_name plugin)" || lc_die "the plugin exited; see $lc_logs/$(pid_name plugin).log"

  local args
  for name in "${sidecars[@]}"; do
    sidecar_args "$name"
    lc_start "$(pid_name "$name")" "$lc_bin/$name" "${args[@]}"
  done
  local failed=0
  for name in "${sidecars[@]}"; do
    lc_wait "$name settled" "$CONNECT_TIMEOUT" settled "$name" || true
  done
  for name in plugin "${sidecars[@]}"; do
    if ! lc_pid_alive "$(pid_name "$name")"; then
      failed=1
      echo "$name exited; last lines of $lc_logs/$(pid_name "$name").log:" >&2
      tail -n 5 "$lc_logs/$(pid_name "$name").log" | sed 's/^/    /' >&2
    fi
  done
  ((failed == 0)) || lc_die "not every driver process is running (driver.sh down stops the rest)"
  lc_log "driver $DRIVER_NAME and its sidecars run; logs in $lc_logs/driver-*.log"
}

cmd_down() {
  lc_require_root "driver.sh down"
  local name
  for name in "${sidecars[@]}" plugin; do lc_stop "$(pid_name "$name")"; done
  rm -f "$socket"
  rmdir "$(dirname "$socket")" 2>/dev/null || true
  if lc_pid_alive kube-apiserver; then
    lc_kubectl delete csidriver -l "$managed_label" --field-selector "metadata.name=$DRIVER_NAME" \
      --ignore-not-found >/dev/null
  fi
  lc_log "driver $DRIVER_NAME stopped"
}

cmd_status() {
  local name state
  for name in plugin "${sidecars[@]}"; do
    state=stopped
    lc_pid_alive "$(pid_name "$name")" && state="running (pid $(cut -d' ' -f1 <"$lc_pids/$(pid_name "$name").pid"))"
    printf '%-16s %s\n' "$name" "$state"
  done
  if lc_pid_alive kube-apiserver; then
    printf '%-16s %s\n' CSINode "$(lc_kubectl get csinode -o jsonpath='{range .items[*]}{.metadata.name}: {.spec.drivers[*].name}{"\n"}{end}')"
  fi
}

case ${1:-} in
  up) shift; cmd_up "$@" ;;
  down) cmd_down ;;
  status) cmd_status ;;
  *) lc_die "usage: driver.sh up [PLUGIN [ARG...]] | down | status" ;;
esac
