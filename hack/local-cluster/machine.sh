# shellcheck shell=bash disable=SC2154 # lib.sh, sourced first, defines the lc_* paths
# What the local cluster changes on the machine outside its own directory, and
# how down.sh puts it back. Sourced after lib.sh by up.sh and down.sh.
#
# up.sh records a baseline before it starts anything (run/baseline/): the
# iptables chains and rules, the sysctls the kubelet, kube-proxy and the CNI
# bridge plugin may change, which system paths and cgroups exist, the network
# namespaces and links. down.sh removes only what appeared since then and
# belongs to the cluster (KUBE-*/CNI-* chains and the rules that jump to them
# or name its networks, cni-* and the workers' dpw-* network namespaces, the
# kubepods and diskplane-worker-* cgroups, the bridges and the workers'
# veths), restores the sysctls, and never touches what was there before.
# worker.sh removes its workers itself; what is here for them is the fallback
# after a worker.sh that failed half way.

lc_baseline=$lc_run/baseline
# Marks /var/lib/kubelet as created by up.sh, so that down.sh may delete it.
lc_marker=.diskplane-local-cluster

# Sysctls set by the kubelet (kernel tunables it wants), kube-proxy and the
# bridge plugin (forwarding, bridge netfilter).
lc_sysctls=(
  vm/overcommit_memory vm/panic_on_oom kernel/panic kernel/panic_on_oops
  kernel/keys/root_maxkeys kernel/keys/root_maxbytes
  net/ipv4/ip_forward net/ipv6/conf/all/forwarding net/ipv4/conf/all/route_localnet
  net/bridge/bridge-nf-call-iptables net/bridge/bridge-nf-call-ip6tables
  net/netfilter/nf_conntrack_max net/netfilter/nf_conntrack_tcp_timeout_established
  net/netfilter/nf_conntrack_tcp_timeout_close_wait
)
# System paths the cluster's processes create when missing. down.sh touches
# them only when they did not exist before up.sh: the kubelet's own (its root,
# which carries up.sh's marker, and the pod logs, which only the kubelet that
# owns /var/lib/kubelet writes) are deleted; the shared ones (CNI state,
# network namespaces, containerd's shim socket dir, which another containerd
# would use too) lose this cluster's entries and then only empty directories.
lc_kubelet_paths=(/var/lib/kubelet /var/log/pods /var/log/containers)
lc_shared_paths=(/var/lib/cni /run/netns /run/containerd)
lc_system_paths=("${lc_kubelet_paths[@]}" "${lc_shared_paths[@]}")
lc_iptables_tables=(filter nat mangle raw)

# machine_record_baseline writes run/baseline once; a second up.sh after a
# failed one keeps the first record, which still describes the clean machine.
machine_record_baseline() {
  [[ -f $lc_baseline/complete ]] && return 0
  rm -rf "$lc_baseline"
  mkdir -p "$lc_baseline"
  local ipt t s p
  for ipt in iptables ip6tables; do
    for t in "${lc_iptables_tables[@]}"; do
      "$ipt" -t "$t" -S >"$lc_baseline/$ipt-$t" 2>/dev/null || true
    done
  done
  for ipt in iptables ip6tables; do
    "$ipt-save" 2>/dev/null | sed -n 's/^\*//p' >"$lc_baseline/$ipt-tables" || true
  done
  for s in "${lc_sysctls[@]}"; do
    [[ -f /proc/sys/$s ]] && echo "$s $(</proc/sys/"$s")"
  done >"$lc_baseline/sysctls"
  # A kubelet dir with the marker is a leftover of an earlier up.sh, not
  # something that was there before.
  for p in "${lc_system_paths[@]}"; do
    [[ -e $p || -L $p ]] || continue
    [[ $p == "$lc_kubelet_dir" && -e $p/$lc_marker ]] && continue
    echo "$p"
  done >"$lc_baseline/paths"
  for p in /sys/fs/cgroup/*/kubepods /sys/fs/cgroup/*/"$lc_worker_cgroup"*; do
    [[ -d $p ]] && echo "$p"
  done >"$lc_baseline/cgroups"
  ls /run/netns 2>/dev/null >"$lc_baseline/netns" || true
  ip -o link show | awk -F': ' '{print $2}' | cut -d@ -f1 >"$lc_baseline/links"
  touch "$lc_baseline/complete"
}

machine_has_baseline() { [[ -f $lc_baseline/complete ]]; }

# machine_new_cgroups lists the pod cgroup trees made since the baseline: the
# single node's kubepods, the workers' diskplane-worker-k.
machine_new_cgroups() {
  local dir
  for dir in /sys/fs/cgroup/*/kubepods /sys/fs/cgroup/*/"$lc_worker_cgroup"*; do
    [[ -d $dir ]] || continue
    grep -qxF "$dir" "$lc_baseline/cgroups" || echo "$dir"
  done
}

# machine_kill_pod_processes kills every process left in the pod cgroups the
# kubelets created (containers whose pods were not deleted), then the
# containerd shims that served one of this cluster's containerd sockets.
machine_kill_pod_processes() {
  local dir pid cmd
  for dir in $(machine_new_cgroups); do
    find "$dir" -name cgroup.procs -exec cat {} + 2>/dev/null
  done | sort -u | while read -r pid; do
    kill -KILL "$pid" 2>/dev/null || true
  done
  for cmd in /proc/[0-9]*/cmdline; do
    pid=${cmd#/proc/}
    pid=${pid%/cmdline}
    [[ $(readlink "/proc/$pid/exe" 2>/dev/null) == */containerd-shim-runc-v2 ]] || continue
    tr '\0' ' ' <"$cmd" 2>/dev/null | grep -qF -- "-address $lc_state/" || continue
    kill -KILL "$pid" 2>/dev/null && lc_log "killed containerd shim $pid"
  done
  return 0
}

# machine_mounts_below PREFIX... lists the mount points at or below any
# PREFIX, deepest first (a point mounted twice is listed twice).
machine_mounts_below() {
  local m p
  # /proc/self/mountinfo field 5 is the mount point, with spaces as \040.
  awk '{print $5}' /proc/self/mountinfo | while read -r m; do
    m=$(printf '%b' "$m")
    for p in "$@"; do
      if [[ $m == "$p" || $m == "$p"/* ]]; then
        printf '%s\t%s\n' "${#m}" "$m"
        break
      fi
    done
  done | sort -rn | cut -f2-
}

# machine_unmount_all unmounts every mount below the kubelet dir, this
# cluster's directories and containerd state, and the network namespaces
# containerd made since the baseline; in passes, because the kubelet stacks a
# bind mount of its dir on itself.
machine_unmount_all() {
  local prefixes=("$lc_kubelet_dir" "$LOCAL_CLUSTER_DIR" "$lc_state") ns m pass mounts
  for ns in $(machine_new_netns); do prefixes+=("/run/netns/$ns"); done
  for pass in 1 2 3 4 5; do
    mounts=$(machine_mounts_below "${prefixes[@]}")
    [[ -n $mounts ]] || return 0
    while read -r m; do
      umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || lc_log "could not unmount $m (pass $pass)"
    done <<<"$mounts"
  done
  lc_log "mounts left after 5 passes: $(machine_mounts_below "${prefixes[@]}" | tr '\n' ' ')"
}

# machine_detach_loops detaches loop devices whose backing file lies below the
# kubelet dir (the kubelet holds block volumes open through one), this
# cluster's directory, or a directory in LOOP_BACKING_DIRS (colon-separated;
# e.g. where the EC2 emulator keeps volume files). Other loop devices on the
# machine belong to someone else and are never touched.
machine_detach_loops() {
  local dirs=("$lc_kubelet_dir" "$LOCAL_CLUSTER_DIR") f dev backing d
  local IFS_save=$IFS
  IFS=: read -r -a extra <<<"${LOOP_BACKING_DIRS:-}"
  IFS=$IFS_save
  dirs+=("${extra[@]}")
  for f in /sys/block/loop*/loop/backing_file; do
    [[ -f $f ]] || continue
    backing=$(<"$f")
    dev=/dev/$(basename "$(dirname "$(dirname "$f")")")
    for d in "${dirs[@]}"; do
      [[ -n $d && $backing == "${d%/}"/* ]] || continue
      losetup -d "$dev" && lc_log "detached $dev ($backing)"
      break
    done
  done
}

# machine_new_netns lists the network namespaces made since the baseline:
# containerd's cni-* for the single node's pods, the workers' dpw-*.
machine_new_netns() {
  [[ -d /run/netns ]] || return 0
  local path ns
  for path in /run/netns/cni-* /run/netns/"$lc_worker_netns"*; do
    [[ -e $path ]] || continue
    ns=${path#/run/netns/}
    grep -qxF "$ns" "$lc_baseline/netns" 2>/dev/null || echo "$ns"
  done
}

machine_remove_netns() {
  local ns
  for ns in $(machine_new_netns); do rm -f "/run/netns/$ns"; done
}

# machine_clean_iptables removes, per table and IP family, the rules added
# since the baseline that jump to a KUBE-*/CNI-* chain or name the pod network,
# its bridge, the workers' network or their bridge, then flushes and deletes
# the KUBE-*/CNI-* chains that are new. Rules are
# deleted by number, highest first, so their quoting never matters.
machine_clean_iptables() {
  local ipt t chains new_chains chain n rule
  for ipt in iptables ip6tables; do
    command -v "$ipt" >/dev/null || continue
    for t in "${lc_iptables_tables[@]}"; do
      "$ipt" -t "$t" -S >/dev/null 2>&1 || continue
      new_chains=$("$ipt" -t "$t" -S | awk '/^-N (KUBE-|CNI-)/{print $2}' |
        grep -vxF -f <(awk '/^-N /{print $2}' "$lc_baseline/$ipt-$t" 2>/dev/null) || true)
      chains=$("$ipt" -t "$t" -S | awk '/^-[PN] /{print $2}')
      for chain in $chains; do
        grep -qxF "$chain" <<<"$new_chains" && continue
        n=0
        { "$ipt" -t "$t" -S "$chain" | grep '^-A ' || true; } | while IFS= read -r rule; do
          n=$((n + 1))
          grep -qxF -- "$rule" "$lc_baseline/$ipt-$t" 2>/dev/null && continue
          if [[ $rule =~ -[jg]\ (KUBE-|CNI-) || $rule == *"${lc_pod_cidr%.*/*}."* || $rule == *" $lc_cni_bridge "* ||
            $rule == *" $lc_worker_net."* || $rule == *" $lc_worker_bridge "* ]]; then
            echo "$n"
          fi
        done | sort -rn | while read -r n; do
          "$ipt" -t "$t" -D "$chain" "$n"
        done
      done
      for chain in $new_chains; do "$ipt" -t "$t" -F "$chain"; done
      for chain in $new_chains; do "$ipt" -t "$t" -X "$chain"; done
    done
  done
}

# machine_remove_empty_tables deletes the iptables tables (nftables tables
# under iptables-nft) that did not exist before and are empty again. The
# iptables tools cannot delete a table; nft can, when it is installed.
# Without it the empty tables stay: no chains, no rules, policy ACCEPT, which
# filters nothing.
machine_remove_empty_tables() {
  local ipt family t
  for ipt in iptables ip6tables; do
    family=ip
    [[ $ipt == ip6tables ]] && family=ip6
    for t in $("$ipt-save" 2>/dev/null | sed -n 's/^\*//p'); do
      grep -qxF "$t" "$lc_baseline/$ipt-tables" 2>/dev/null && continue
      "$ipt" -t "$t" -S | grep -qE '^-(N|A) ' && continue
      if command -v nft >/dev/null; then
        nft delete table "$family" "$t" && lc_log "deleted empty $ipt table $t"
      else
        lc_log "empty $ipt table $t stays (no nft tool to delete it; it has no rules)"
      fi
    done
  done
}

# machine_remove_links deletes the bridges (the single node's pod bridge, the
# workers' dpn0) and the workers' veths made since the baseline.
machine_remove_links() {
  local link
  for link in $(ip -o link show | awk -F': ' '{print $2}' | cut -d@ -f1); do
    [[ $link == "$lc_cni_bridge" || $link == "$lc_worker_bridge" || $link == "$lc_worker_veth"* ]] || continue
    grep -qxF "$link" "$lc_baseline/links" && continue
    ip link delete "$link" && lc_log "deleted link $link"
  done
}

# machine_remove_cgroups removes the pod cgroup trees made since the baseline
# (deepest first; a cgroup directory is removed with rmdir).
machine_remove_cgroups() {
  local dir
  for dir in $(machine_new_cgroups); do
    find "$dir" -depth -type d -exec rmdir {} + 2>/dev/null || lc_log "could not remove all of $dir"
  done
}

machine_restore_sysctls() {
  local key value
  while read -r key value; do
    [[ -f /proc/sys/$key && $(</proc/sys/"$key") != "$value" ]] || continue
    echo "$value" >"/proc/sys/$key" && lc_log "restored sysctl $key=$value"
  done <"$lc_baseline/sysctls"
}

# machine_remove_paths deletes the kubelet's paths that appeared since the
# baseline (its root only with up.sh's marker), removes this cluster's CNI
# leases and cache, and prunes the shared paths that appeared since down to
# nothing: only empty directories go, so another program's files stay.
machine_remove_paths() {
  local p
  for p in "${lc_kubelet_paths[@]}"; do
    [[ -e $p || -L $p ]] || continue
    grep -qxF "$p" "$lc_baseline/paths" && continue
    if [[ $p == "$lc_kubelet_dir" && ! -e $p/$lc_marker ]]; then
      lc_log "$p has no $lc_marker marker; leaving it"
      continue
    fi
    rm -rf --one-file-system "$p" && lc_log "removed $p"
  done
  rm -rf "/var/lib/cni/networks/$lc_cni_name" /var/lib/cni/results/"$lc_cni_name"-*
  for p in "${lc_shared_paths[@]}"; do
    [[ -d $p ]] || continue
    grep -qxF "$p" "$lc_baseline/paths" && continue
    find "$p" -depth -type d -empty -delete 2>/dev/null
    if [[ -e $p ]]; then
      lc_log "$p is not empty (another program's files?); leaving it"
    else
      lc_log "removed $p"
    fi
  done
}
