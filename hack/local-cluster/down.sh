#!/usr/bin/env bash
# Tears down what up.sh (and driver.sh) started and leaves the machine as up.sh
# found it: stops only the processes recorded in run/pids (checking each one's
# binary before signalling), removes the workers (worker.sh down), kills
# leftover containers, unmounts everything below the kubelet dir and the
# cluster's directories, detaches the loop devices backed by files there (or
# in LOOP_BACKING_DIRS), removes the iptables chains, network namespaces,
# bridges, veths and cgroups that appeared since up.sh's baseline, restores
# sysctls, and deletes the run directory's state
# (logs stay in run/logs for a post-mortem). Safe to run twice, and after an
# up.sh that failed half way. Needs root.
set -uo pipefail
source "$(dirname "$0")/lib.sh"
source "$lc_here/machine.sh"
lc_require_root down.sh
start=$SECONDS

workers=$(lc_worker_ids)
if ! machine_has_baseline && ! compgen -G "$lc_pids/*.pid" >/dev/null && [[ -z $workers ]]; then
  lc_log "nothing to tear down (no recorded processes, no baseline)"
  rm -rf "$lc_state"
  exit 0
fi

core=(containerd etcd kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy snapshot-controller)
is_core() {
  local c
  for c in "${core[@]}"; do [[ $1 == "$c" ]] && return 0; done
  return 1
}

# Workers killed (worker.sh kill) and not removed: no kubelet stops their
# pods or unmounts their volumes.
dead_nodes=()
for k in $workers; do lc_worker_init_pid "$k" >/dev/null || dead_nodes+=("worker-$k"); done

# a_node_runs succeeds while a kubelet runs: the host's or a worker's.
a_node_runs() {
  lc_pid_alive kubelet || ((${#dead_nodes[@]} < $(wc -w <<<"$workers")))
}

# no_volume_attachments succeeds when no VolumeAttachment is left but those
# of dead workers (only the attach/detach controller's six-minute forced
# detach would remove them; the loop devices are detached below instead).
no_volume_attachments() {
  local nodes node
  nodes=$(lc_kubectl get volumeattachments -o jsonpath='{.items[*].spec.nodeName}') || return 1
  for node in $nodes; do
    [[ " ${dead_nodes[*]} " == *" $node "* ]] || return 1
  done
}

# Pods that use a volume a CSI driver must unmount and detach: a claim, a
# generic ephemeral volume or a CSI inline volume; "namespace name" lines.
pods_with_volumes() {
  lc_kubectl get pods --all-namespaces -o jsonpath='{range .items[*]}{.metadata.namespace}{" "}{.metadata.name}{" "}{.spec.volumes[*].persistentVolumeClaim.claimName}{.spec.volumes[*].ephemeral.volumeClaimTemplate.spec.resources.requests.storage}{.spec.volumes[*].csi.driver}{"\n"}{end}' |
    awk 'NF > 2 { print $1, $2 }'
}
no_pods_with_volumes() {
  local left
  left=$(pods_with_volumes) && [[ -z $left ]]
}

# 1. While the kubelets and the CSI drivers still run, delete first the pods
# that use volumes, so the kubelet unmounts them and the attach/detach
# controller detaches them through the driver, which is the clean way for
# volumes to leave; then the rest, a driver installed in the cluster among
# them. When driver.sh's plugin was started but has died, volumes cannot
# leave that way: wait briefly and let steps 3-4 clean up instead.
if lc_pid_alive kube-apiserver && a_node_runs; then
  driver_started=0 driver_alive=0 pod_timeout=60
  compgen -G "$lc_pids/driver-plugin.pid" >/dev/null && driver_started=1
  lc_pid_alive driver-plugin && driver_alive=1
  ((driver_started == 0 || driver_alive == 1)) || pod_timeout=15
  for node in "${dead_nodes[@]}"; do
    lc_log "force-deleting the pods of $node (killed: no kubelet stops them)"
    "$(lc_kubectl_path)" --kubeconfig="$lc_kubeconfig" delete pods --all-namespaces \
      --field-selector="spec.nodeName=$node" --force --grace-period=0 >/dev/null 2>&1
  done
  if workloads=$(pods_with_volumes) && [[ -n $workloads ]]; then
    lc_log "deleting the pods that use volumes"
    while read -r ns name; do
      "$(lc_kubectl_path)" --kubeconfig="$lc_kubeconfig" delete pod -n "$ns" "$name" \
        --grace-period=1 --wait=false >/dev/null 2>&1
    done <<<"$workloads"
    lc_wait "pods with volumes gone" "$pod_timeout" no_pods_with_volumes ||
      lc_log "some pods with volumes did not go away in ${pod_timeout}s; their processes are killed below"
  fi
  lc_wait "VolumeAttachments gone" "$pod_timeout" no_volume_attachments ||
    lc_log "VolumeAttachments remain; their loop devices are detached below"
  lc_log "deleting the other pods"
  timeout "$pod_timeout" "$(lc_kubectl_path)" --kubeconfig="$lc_kubeconfig" delete pods --all --all-namespaces \
    --grace-period=1 --wait=true >/dev/null 2>&1 ||
    lc_log "some pods did not go away in ${pod_timeout}s; their processes are killed below"
fi

# 2. Host processes: whatever driver.sh or tests added first (newest first),
# then the workers, then the cluster in the reverse order of up.sh.
# shellcheck disable=SC2045 # names in run/pids are ours: no spaces or globs
for f in $(ls -t "$lc_pids"/*.pid 2>/dev/null); do
  name=$(basename "$f" .pid)
  is_core "$name" || lc_stop "$name"
done
# shellcheck disable=SC2086 # worker numbers
[[ -z $workers ]] || "$lc_here/worker.sh" down $workers || lc_log "worker.sh down failed; cleaning up below"
for name in snapshot-controller kube-proxy kubelet kube-scheduler kube-controller-manager kube-apiserver etcd; do
  lc_stop "$name"
done

# 3. Containers the kubelet left, then containerd.
if lc_pid_alive containerd; then
  ctr=(ctr --address "$lc_containerd_sock" --namespace k8s.io)
  for task in $("${ctr[@]}" tasks ls -q 2>/dev/null); do "${ctr[@]}" tasks kill -s SIGKILL "$task" >/dev/null 2>&1; done
  for task in $("${ctr[@]}" tasks ls -q 2>/dev/null); do "${ctr[@]}" tasks rm -f "$task" >/dev/null 2>&1; done
  for c in $("${ctr[@]}" containers ls -q 2>/dev/null); do "${ctr[@]}" containers rm "$c" >/dev/null 2>&1; done
fi
lc_stop containerd

# 4. The machine: processes, mounts, loop devices, network, cgroups, sysctls,
# paths. up.sh writes the baseline before it starts anything, so without one
# nothing of the cluster ever ran.
if machine_has_baseline; then
  machine_kill_pod_processes
  machine_unmount_all
  machine_detach_loops
  machine_remove_netns
  machine_clean_iptables
  machine_remove_empty_tables
  machine_remove_links
  machine_remove_cgroups
  machine_restore_sysctls
  machine_remove_paths
fi

# 5. The run directory's state; logs stay.
rm -rf --one-file-system "$lc_state" "$lc_pids" "$lc_pki" "$lc_run/etcd" "$lc_run/containerd" "$lc_run/cni" \
  "$lc_run"/*.yaml "$lc_workers" "$lc_workers_tsv" "$lc_baseline"
lc_log "local cluster down in $((SECONDS - start))s; logs kept in $lc_logs"
