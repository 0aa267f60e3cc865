#!/usr/bin/env bash
# The worker nodes of the local cluster's multi-node mode (WORKERS=N up.sh).
# Worker k is the Node worker-k, an EC2 instance to the driver, whose
# containerd, kubelet and kube-proxy run on this machine in namespaces of
# their own:
#   network  netns dpw-k: eth0 10.89.0.(10+k)/24, a veth (dpv-k on the host)
#            on the host's bridge dpn0 (10.89.0.1, the default route); pods in
#            10.244.k.0/24 on a CNI bridge inside; the host routes that
#            network to the worker, so pods on different workers reach each
#            other
#   PID      PID 1 is this script ("init"): one SIGKILL stops the node at once
#   mount    private /var/lib/kubelet (rshared), /var/log/pods,
#            /var/log/containers, /var/lib/cni, /run/containerd, /run/netns and
#            /dev, all from run/workers/k/; the namespace is held by a bind
#            mount on run/workers/k/mntns, so it outlives a killed init
#   UTS, IPC the hostname worker-k
#   cgroups  pods below /diskplane-worker-k (the kubelet's cgroupRoot), whose
#            devices cgroup denies reading and writing every loop device
#            (b 7:0-1023 rw): the EC2 emulator grants the ones attached to the
#            worker's instance
# Its /dev is a tmpfs the host prepares on run/workers/k/dev (the host can add
# nodes and links there later) with the usual nodes, loop-control and
# loop0-511.
#
#   worker.sh up K...       starts workers K... and waits until their Nodes are Ready
#   worker.sh kill K        abrupt loss of node K: SIGKILL to its init, so the
#                           kubelet, containerd, the shims and the containers
#                           die at once; its mounts stay as a crash leaves them
#                           (the namespace is held) and the Node stays
#                           registered, NotReady after the node monitor's grace
#   worker.sh poweroff K    powers node K off as a shutdown from EC2 does: its
#                           instance is stopped through EC2's API
#                           (StopInstances), the node dies at once as under
#                           kill (its kubelet says no goodbye), and its mounts
#                           go as under down; the Node stays registered
#   worker.sh hang K        node K's guest hangs: every process of the worker
#                           is stopped (SIGSTOP) where it stands, its mounts
#                           and devices stay held, and its instance keeps
#                           running in EC2; kill, down or poweroff end it
#   worker.sh cut K         cuts worker K off the API server, both ways (it cannot
#                           reach port 6443, the apiserver cannot reach its
#                           kubelet); pods, other workers and the host's other
#                           services stay reachable
#   worker.sh uncut K       undoes cut
#   worker.sh down K...     removes workers K..., running or killed: processes,
#                           mounts, the loop devices their kubelet held, netns,
#                           veth, cgroups, files; the Node object stays
#   worker.sh exec K CMD... runs CMD in worker K's namespaces (after kill: in its
#                           held mount namespace, with the host's /proc, and
#                           its network namespace)
#   worker.sh import ARCHIVE...  imports image archives into every running
#                           worker's containerd, and into every worker that
#                           starts later
#   worker.sh status        shows each worker, its state and its Node's readiness
#
# Read by up:
#   WORKER_ZONES          ("us-east-1a us-east-1b") zones, assigned round-robin
#   WORKER_INSTANCE_TYPE  (m5.large)
#   NODE_TAINTS           (unset) taints every worker registers with (as up.sh)
#   WORKER_READY_TIMEOUT  (180) seconds to wait for the Nodes to be Ready
# Read by poweroff: EC2_ENDPOINT (http://127.0.0.1:8700, the local cluster's
# ec2-emulator), AWS_REGION (us-east-1), AWS_ACCESS_KEY_ID and
# AWS_SECRET_ACCESS_KEY (the emulator's local keys) to sign the call.
# Worker k's instance ID is i-0d15c followed by k in 12 decimal digits, e.g.
# i-0d15c000000000001. run/workers.tsv has one line per worker: name, IP,
# zone, instance ID, instance type, /dev directory, devices cgroup, netns.
# Needs root.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
source "$lc_here/machine.sh"
source "$lc_here/node.sh"

# The worker's private directories (below run/workers/k/) and where its init
# mounts them.
worker_mounts=(kubelet:/var/lib/kubelet pod-logs:/var/log/pods container-logs:/var/log/containers
  cni:/var/lib/cni run-containerd:/run/containerd netns:/run/netns)
# The devices the worker's /dev holds besides loop0-511: "name mode type major minor".
worker_devices=("null 666 c 1 3" "zero 666 c 1 5" "full 666 c 1 7" "random 666 c 1 8"
  "urandom 666 c 1 9" "tty 666 c 5 0" "kmsg 600 c 1 11" "loop-control 660 c 10 237")
worker_loop_nodes=512
# The devices cgroup denies these loop minors: the loop nodes plus as many
# again, for a device made on the host with a higher number.
worker_loop_minors=1024
# The image archives worker.sh import gave the workers, one path per line:
# a worker that starts later imports them too.
w_imported=$lc_workers/imported-images

usage() {
  sed -n '/^#   worker.sh up/,/^# Needs root/p' "$0" | sed 's/^# \{0,1\}//' >&2
  exit 2
}

# worker_vars K sets the w_* names of worker K.
worker_vars() {
  if ! [[ $1 =~ ^[1-9][0-9]*$ ]] || (($1 > lc_max_workers)); then
    lc_die "worker $1: expected a number from 1 to $lc_max_workers"
  fi
  w_k=$1
  w_name=worker-$1
  w_ip=$lc_worker_net.$((10 + $1))
  w_netns=$lc_worker_netns$1
  w_veth=$lc_worker_veth$1
  w_cgroup=$lc_worker_cgroup$1
  w_dir=$lc_workers/$1
  w_state=$lc_state/worker-$1
  w_sock=$w_state/containerd.sock
  w_pod_cidr=${lc_pod_cidr%.*.*}.$1.0/24
}

# worker_mac N prints the MAC address of 10.89.0.N (locally administered).
worker_mac() { printf '02:00:0a:59:00:%02x\n' "$1"; }

# cgroup_hierarchies lists the cgroup v1 hierarchies (cgroup2's has no
# controllers here and the kubelet does not use it).
cgroup_hierarchies() { awk '$3 == "cgroup" {print $2}' /proc/self/mounts; }

# --- up

# host_network sets up, once, what every worker shares on the host: the
# bridge, forwarding, and masquerading of what leaves for the outside. up.sh's
# baseline has recorded ip_forward and the iptables rules; down.sh restores
# them. The bridge gets a fixed MAC address: otherwise it takes the lowest of
# its ports', and when that veth goes with its worker, the other workers'
# ARP entries for the gateway point nowhere until they expire (a kubelet
# lost the apiserver for 45 s that way).
host_network() {
  if ! ip link show "$lc_worker_bridge" >/dev/null 2>&1; then
    ip link add "$lc_worker_bridge" address "$(worker_mac 1)" type bridge
    ip addr add "$lc_worker_net.1/24" dev "$lc_worker_bridge"
    ip link set "$lc_worker_bridge" up
  fi
  echo 1 >/proc/sys/net/ipv4/ip_forward
  iptables_ensure filter FORWARD -i "$lc_worker_bridge" -j ACCEPT
  iptables_ensure filter FORWARD -o "$lc_worker_bridge" -j ACCEPT
  iptables_ensure nat POSTROUTING -s "$lc_worker_net.0/24" ! -o "$lc_worker_bridge" -j MASQUERADE
}

iptables_ensure() {
  local table=$1
  shift
  iptables -t "$table" -C "$@" 2>/dev/null || iptables -t "$table" -I "$@"
}

# worker_kubeconfig writes, once, the kubeconfig the workers use: the admin
# credentials with the address the apiserver advertises (the kubernetes
# Service's endpoint, the host's address), which the workers reach through
# their default route; 127.0.0.1 would be their own loopback.
worker_kubeconfig() {
  local file=$lc_workers/kubeconfig ip
  [[ ! -f $file ]] || return 0
  lc_wait "the apiserver's advertised address" 60 apiserver_address
  ip=$(apiserver_address)
  lc_kubectl config view --raw --minify | sed "s|server: https://127.0.0.1:6443|server: https://$ip:6443|" >"$file.tmp"
  chmod 600 "$file.tmp"
  mv "$file.tmp" "$file"
}

apiserver_address() {
  local ip
  ip=$(lc_kubectl get endpointslice -n default kubernetes -o jsonpath='{.endpoints[0].addresses[0]}') && [[ -n $ip ]] && echo "$ip"
}

# make_dev fills the worker's /dev, a tmpfs mounted on the host so that the
# host can add nodes and links to it later. /dev/pts and /dev/shm are mounted
# by the init, inside the worker.
make_dev() {
  local d=$w_dir/dev dev name mode type major minor n
  mkdir -p "$d"
  mount -t tmpfs -o mode=755,nosuid,size=4m "dpw-dev-$w_k" "$d"
  for dev in "${worker_devices[@]}"; do
    read -r name mode type major minor <<<"$dev"
    mknod -m "$mode" "$d/$name" "$type" "$major" "$minor"
  done
  for ((n = 0; n < worker_loop_nodes; n++)); do mknod -m 660 "$d/loop$n" b 7 "$n"; done
  chgrp disk "$d"/loop*
  mkdir "$d/pts" "$d/shm"
  ln -s pts/ptmx "$d/ptmx"
  ln -s /proc/self/fd "$d/fd"
  ln -s /proc/self/fd/0 "$d/stdin"
  ln -s /proc/self/fd/1 "$d/stdout"
  ln -s /proc/self/fd/2 "$d/stderr"
}

# make_cgroups creates /diskplane-worker-k in every hierarchy (the kubelet
# checks that its cgroupRoot exists) and denies reading and writing the loop
# devices in its devices cgroup. The cgroup stays default-allow with these
# exceptions: under it runc's "allow all" for a privileged container is
# accepted and keeps the exceptions (under a default-deny parent it would be
# refused). mknod stays allowed: runc gives every other container "b *:* m",
# which the kernel refuses below a parent whose exceptions deny m for any
# block device. Every cgroup made below inherits the exceptions; an allow
# written later is not inherited, so whoever grants a device writes it
# top-down.
make_cgroups() {
  local h n
  for h in $(cgroup_hierarchies); do mkdir -p "$h/$w_cgroup"; done
  for ((n = 0; n < worker_loop_minors; n++)); do
    echo "b 7:$n rw" >"/sys/fs/cgroup/devices/$w_cgroup/devices.deny"
  done
}

# make_netns creates the worker's network namespace, persisted on
# /run/netns/dpw-k by unshare (ip netns add would also turn /run/netns into
# a shared mount point of its own, which would outlive the workers), its
# veth on dpn0, its address and default route, and the host's route to its
# pods. Its eth0's MAC address is fixed, like an instance's network
# interface: a restarted worker finds the host's ARP entry still right.
make_netns() {
  local ns=/run/netns/$w_netns
  mkdir -p /run/netns
  touch "$ns"
  unshare --net="$ns" true
  ip link add "$w_veth" type veth peer name eth0 address "$(worker_mac $((10 + w_k)))" netns "$w_netns"
  ip link set "$w_veth" master "$lc_worker_bridge" up
  ip -n "$w_netns" link set lo up
  ip -n "$w_netns" addr add "$w_ip/24" dev eth0
  ip -n "$w_netns" link set eth0 up
  ip -n "$w_netns" route add default via "$lc_worker_net.1"
  ip route add "$w_pod_cidr" via "$w_ip" dev "$lc_worker_bridge"
}

# write_configs writes the worker's containerd, CNI, kubelet and kube-proxy
# configuration (node.sh: as the single node's, with the worker's own root,
# state, socket, address, pod network and cgroup root).
write_configs() {
  mkdir -p "$w_dir/containerd" "$w_dir/cni-conf" "$w_state"
  node_containerd_config "$w_dir/containerd.toml" "$w_dir/containerd" "$w_state" "$w_sock" "$w_dir/cni-conf"
  node_cni_config "$w_dir/cni-conf" "$w_pod_cidr"
  node_kubelet_config "$w_dir/kubelet.yaml" "$w_ip" "aws:///$w_zone/$w_instance" "$w_sock" "/$w_cgroup"
  node_kube_proxy_config "$w_dir/kube-proxy.yaml" "$lc_workers/kubeconfig" "$w_name"
  local taints=()
  [[ -z ${NODE_TAINTS:-} ]] || taints=(--register-with-taints="$NODE_TAINTS")
  printf '%s\n' --config="$w_dir/kubelet.yaml" --kubeconfig="$lc_workers/kubeconfig" \
    --root-dir="$lc_kubelet_dir" --hostname-override="$w_name" --node-ip="$w_ip" \
    --node-labels="$(node_labels "$w_zone" "${w_zone%[a-z]}" "$w_type")" "${taints[@]}" >"$w_dir/kubelet.args"
}

# start_init starts the worker's init in new PID, mount, UTS and IPC
# namespaces inside its network namespace, and records in run/workers/k/init
# the init's host PID with its PID namespace (lib.sh's lc_worker_init_pid)
# and unshare's PID: unshare waits for the init and holds the mount
# namespace too, and with --kill-child its death takes the init along. The
# mount namespace is bound on run/workers/k/mntns before the init runs.
# Mounts are slaves of the host's (the host's / is private anyway): nothing
# the worker mounts appears on the host.
start_init() {
  local parent pid child children
  touch "$w_dir/mntns"
  # A background job of a script is no process group leader: setsid execs
  # in place, and so do nsenter and unshare, so $! is unshare's PID.
  setsid nsenter --net="/run/netns/$w_netns" -- \
    unshare --pid --fork --kill-child --mount="$w_dir/mntns" --uts --ipc --propagation slave --mount-proc -- \
    "$lc_here/worker.sh" init "$w_k" >"$lc_logs/$w_name.log" 2>&1 </dev/null &
  parent=$!
  # Until the init is found, the record names unshare alone.
  echo "- - $parent" >"$w_dir/init"
  for _ in $(seq 100); do
    # unshare's children: a short-lived helper that binds the mount
    # namespace, then the init, PID 1 of the new PID namespace.
    children=()
    # (no newline at its end: read fails, having read the PIDs)
    read -r -a children 2>/dev/null <"/proc/$parent/task/$parent/children" || true
    for child in "${children[@]}"; do
      [[ $(awk '$1 == "NSpid:" {print $NF}' "/proc/$child/status" 2>/dev/null) == 1 ]] && pid=$child
    done
    [[ -z ${pid:-} ]] || break
    kill -0 "$parent" 2>/dev/null || lc_die "$w_name's init did not start; see $lc_logs/$w_name.log"
    sleep 0.05
  done
  [[ -n ${pid:-} ]] || lc_die "$w_name's init did not appear; see $lc_logs/$w_name.log"
  echo "$pid $(readlink "/proc/$pid/ns/pid") $parent" >"$w_dir/init"
}

# write_tsv rewrites run/workers.tsv from the workers' records.
write_tsv() {
  local k
  {
    printf '# name\tip\tzone\tinstance_id\tinstance_type\tdev_dir\tdevices_cgroup\tnetns\n'
    for k in $(lc_worker_ids); do
      [[ ! -f $lc_workers/$k/tsv ]] || cat "$lc_workers/$k/tsv"
    done
  } >"$lc_workers_tsv.tmp"
  mv "$lc_workers_tsv.tmp" "$lc_workers_tsv"
}

# worker_up K prepares worker K on the host and starts its init.
worker_up() {
  worker_vars "$1"
  [[ ! -e $w_dir ]] || lc_die "$w_name exists (running or killed): run worker.sh down $w_k first"
  local zones
  read -r -a zones <<<"${WORKER_ZONES:-us-east-1a us-east-1b}"
  ((${#zones[@]})) || lc_die "WORKER_ZONES is empty"
  w_zone=${zones[(w_k - 1) % ${#zones[@]}]}
  [[ $w_zone =~ ^[a-z]{2}(-[a-z]+)+-[0-9]+[a-z]$ ]] || lc_die "WORKER_ZONES: $w_zone is not an availability zone name"
  w_type=${WORKER_INSTANCE_TYPE:-m5.large}
  w_instance=$(printf 'i-0d15c%012d' "$w_k")
  mkdir -p "$w_dir"
  local m
  for m in "${worker_mounts[@]}"; do mkdir -p "$w_dir/${m%%:*}" "${m#*:}"; done
  make_dev
  make_cgroups
  make_netns
  write_configs
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$w_name" "$w_ip" "$w_zone" "$w_instance" "$w_type" \
    "$w_dir/dev" "/sys/fs/cgroup/devices/$w_cgroup" "$w_netns" >"$w_dir/tsv"
  start_init
  write_tsv
  lc_log "started $w_name ($w_ip, $w_zone, $w_instance, init pid $(lc_worker_init_pid "$w_k"))"
}

# node_ready K SINCE succeeds when worker K's Node is Ready as reported by a
# kubelet started after SINCE (UTC, RFC 3339): a restarted worker's Node is
# still Ready from before for a while.
node_ready() {
  local condition ready heartbeat
  condition=$(lc_kubectl get node "worker-$1" \
    -o jsonpath='{range .status.conditions[?(@.type=="Ready")]}{.status} {.lastHeartbeatTime}{end}' 2>/dev/null) || return 1
  read -r ready heartbeat <<<"$condition"
  [[ $ready == True && ! $heartbeat < $2 ]]
}

# wait_ready K SINCE waits until node_ready; it fails at once when the
# worker's init has exited.
wait_ready() {
  local start=$SECONDS timeout=${WORKER_READY_TIMEOUT:-180}
  until node_ready "$1" "$2"; do
    lc_worker_init_pid "$1" >/dev/null || lc_die "worker-$1's init exited; see $lc_logs/worker-$1*.log"
    ((SECONDS - start < timeout)) || lc_die "node worker-$1 not Ready after ${timeout}s; see $lc_logs/worker-$1*.log"
    sleep 1
  done
  lc_log "node worker-$1 Ready after $((SECONDS - start))s more"
}

cmd_up() {
  (($#)) || usage
  lc_pid_alive kube-apiserver || lc_die "the local cluster's apiserver is not running: start it with WORKERS=N hack/local-cluster/up.sh"
  ! lc_pid_alive kubelet || lc_die "the host runs the single node's kubelet; workers need a cluster started with WORKERS=N"
  [[ -f $lc_kubelet_dir/$lc_marker ]] || lc_die "$lc_kubelet_dir was not made by up.sh"
  local k start=$SECONDS since
  since=$(date -u +%Y-%m-%dT%H:%M:%SZ)
  export PATH=$lc_bin:$PATH
  mkdir -p "$lc_workers" "$lc_logs"
  host_network
  worker_kubeconfig
  for k; do worker_up "$k"; done
  for k; do wait_ready "$k" "$since"; done
  lc_log "workers $* Ready in $((SECONDS - start))s"
}

# --- init: PID 1 of a worker's namespaces

# init_mounts gives the worker its own /dev and directories. They are bound
# while / is still private, so none of them is a peer of /; then everything
# is made rshared, as on a host with systemd: the kubelet wants its root dir
# shared, Bidirectional mounts need it, HostToContainer needs shared or slave.
# The peer groups are new, in this namespace only.
init_mounts() {
  local m
  mount --bind "$w_dir/dev" /dev
  mount -t devpts -o newinstance,ptmxmode=0666,mode=0620,gid=5 devpts /dev/pts
  mount -t tmpfs -o nosuid,nodev,mode=1777 shm /dev/shm
  for m in "${worker_mounts[@]}"; do mount --bind "$w_dir/${m%%:*}" "${m#*:}"; done
  mount --make-rshared /
}

# init_start NAME CMD... starts a component in the background, its output in
# run/logs/worker-k-NAME.log, its PID in init_pids[NAME].
declare -A init_pids
init_start() {
  local name=$1 log=$lc_logs/$w_name-$1.log
  shift
  [[ ! -f $log ]] || mv "$log" "$log.prev"
  "$@" >"$log" 2>&1 </dev/null &
  init_pids[$name]=$!
  lc_log "started $name (pid ${init_pids[$name]} in the worker)"
}

# init_stop, on SIGTERM (worker.sh down): the kubelet and kube-proxy first,
# then containerd; when the init exits, the kernel kills whatever else runs
# in the PID namespace (shims, containers).
init_stop() {
  local name
  lc_log "stopping"
  for name in kubelet kube-proxy containerd; do
    kill -TERM "${init_pids[$name]:-}" 2>/dev/null || continue
    for _ in $(seq 50); do
      kill -0 "${init_pids[$name]}" 2>/dev/null || break
      sleep 0.2
    done
  done
  exit 0
}

cmd_init() {
  worker_vars "$1"
  (($$ == 1)) || lc_die "worker.sh init is the PID 1 of a worker's namespaces; worker.sh up starts it"
  trap init_stop TERM
  hostname "$w_name"
  init_mounts
  export PATH=$lc_bin:$PATH
  init_start containerd containerd --config "$w_dir/containerd.toml"
  lc_wait "containerd ready" 30 ctr --address "$w_sock" version
  # The cluster's images, and those worker.sh import gave the workers before
  # (a restarted worker's containerd starts empty).
  local imported=()
  [[ -f $w_imported ]] && mapfile -t imported <"$w_imported"
  lc_import_images "$w_sock" "$lc_images"/*.tar "${imported[@]}"
  local args
  mapfile -t args <"$w_dir/kubelet.args"
  init_start kubelet kubelet "${args[@]}"
  init_start kube-proxy kube-proxy --config="$w_dir/kube-proxy.yaml"
  # wait returns when every component has exited (or for the trap); bash,
  # as PID 1, also reaps the orphans (the shims) meanwhile.
  wait || true
  lc_log "containerd, kubelet and kube-proxy have exited: the worker's namespaces end"
}

# --- kill, cut, down

cmd_kill() {
  worker_vars "$1"
  local pid
  pid=$(lc_worker_init_pid "$w_k") || lc_die "$w_name is not running"
  kill -KILL "$pid"
  wait_init_gone
  lc_log "killed $w_name (init pid $pid); its mounts stay in $w_dir/mntns until worker.sh down $w_k"
}

# worker_instance prints worker K's instance ID, from its record.
worker_instance() {
  local instance
  read -r _ _ _ instance _ 2>/dev/null <"$w_dir/tsv" || lc_die "$w_name has no record in $w_dir/tsv"
  echo "$instance"
}

# ec2_call ACTION PARAMS sends one call to EC2's Query API, signed with
# Signature Version 4, and prints the answer. The keys reach curl on its
# standard input (a config line), never on its command line.
ec2_call() {
  printf 'user = "%s:%s"\n' "${AWS_ACCESS_KEY_ID:-local-cluster}" "${AWS_SECRET_ACCESS_KEY:-local-cluster-not-a-secret}" |
    curl -fsS --max-time 30 --config - --aws-sigv4 "aws:amz:${AWS_REGION:-us-east-1}:ec2" \
      --data "Action=$1&Version=2016-11-15&$2" "${EC2_ENDPOINT:-http://127.0.0.1:8700}/"
}

cmd_poweroff() {
  worker_vars "$1"
  [[ -d $w_dir ]] || lc_die "no $w_name"
  local instance pid
  instance=$(worker_instance)
  ec2_call StopInstances "InstanceId.1=$instance" >/dev/null || lc_die "EC2 did not stop $instance"
  lc_log "stopped instance $instance through EC2"
  if pid=$(lc_worker_init_pid "$w_k"); then
    kill -KILL "$pid"
    wait_init_gone
  fi
  worker_down "$w_k"
  lc_log "powered $w_name off: instance $instance stopping, its processes and mounts gone"
}

# worker_processes prints the host PIDs of the worker's init and of every
# process below it (the shims are its orphans, the containers theirs).
worker_processes() {
  local init=$1
  ps -e -o pid=,ppid= | awk -v root="$init" '
    { parent[$1] = $2 }
    END {
      for (p in parent) {
        q = p
        for (depth = 0; q != "" && q != 0 && depth < 64; depth++) {
          if (q == root) { print p; break }
          q = parent[q]
        }
      }
    }'
}

cmd_hang() {
  worker_vars "$1"
  local pid p stopped=0
  pid=$(lc_worker_init_pid "$w_k") || lc_die "$w_name is not running"
  # Twice over: a process forked while the first round ran is stopped by
  # the second.
  for _ in 1 2; do
    for p in $(worker_processes "$pid"); do
      kill -STOP "$p" 2>/dev/null && ((++stopped)) || true
    done
  done
  lc_log "$w_name hangs: $stopped stops sent below init $pid; its instance $(worker_instance) still runs (worker.sh poweroff $w_k ends it)"
}

# unshare_pid prints the PID of the worker's unshare while it runs.
unshare_pid() {
  local parent
  read -r _ _ parent 2>/dev/null <"$w_dir/init" || return 1
  [[ $(readlink "/proc/$parent/exe" 2>/dev/null) == */unshare ]] && echo "$parent"
}

# wait_init_gone waits until the worker's init and unshare have exited: the
# kernel has then killed every process of the PID namespace, and only the
# bind on mntns holds the mount namespace.
wait_init_gone() {
  for _ in $(seq 150); do
    lc_worker_init_pid "$w_k" >/dev/null || unshare_pid >/dev/null || return 0
    sleep 0.2
  done
  lc_die "$w_name's processes did not exit in 30s"
}

# cut_rules ACTION adds (-I), checks (-C) or deletes (-D) the rules that cut
# the worker off the API server: nothing from it reaches port 6443 (its pods'
# traffic leaves it masqueraded as its address, so theirs neither), and the
# apiserver does not reach its kubelet (logs, exec). Filtering on the host,
# rather than taking the veth down, keeps pod-to-pod traffic and the
# host's other services (the EC2 emulator) reachable: the control plane is
# lost, not the node's network.
cut_rules() {
  iptables "$1" INPUT -s "$w_ip/32" -p tcp --dport 6443 -j DROP &&
    iptables "$1" OUTPUT -d "$w_ip/32" -p tcp --dport 10250 -j DROP
}

cmd_cut() {
  worker_vars "$1"
  [[ -d $w_dir ]] || lc_die "no $w_name"
  cut_rules -C 2>/dev/null || cut_rules -I
  lc_log "cut $w_name off the API server"
}

cmd_uncut() {
  worker_vars "$1"
  while cut_rules -C 2>/dev/null; do cut_rules -D; done
  lc_log "$w_name reaches the API server again"
}

# detach_kubelet_loops detaches the loop devices this worker's kubelet held
# (it maps a block volume through one) and that the kubelet did not release,
# e.g. after kill. A backing file the kubelet opened is named by its path in
# the worker's mount namespace, /var/lib/kubelet/..., as every worker's is:
# the device and inode tell whether it is this worker's file. This must run
# while the namespace is held: once it is gone, the path is no longer below
# /var/lib/kubelet.
detach_kubelet_loops() {
  local f dev back majmin ino
  for f in /sys/block/loop*/loop/backing_file; do
    [[ -f $f ]] || continue
    back=$(<"$f")
    [[ $back == "$lc_kubelet_dir"/* ]] || continue
    dev=${f#/sys/block/}
    dev=/dev/${dev%%/*}
    read -r majmin ino < <(losetup --list --noheadings -O BACK-MAJ:MIN,BACK-INO "$dev") || continue
    [[ $(nsenter --mount="$w_dir/mntns" stat -L -c '%Hd:%Ld %i' "$back" 2>/dev/null) == "$majmin $ino" ]] || continue
    losetup -d "$dev" && lc_log "detached $dev ($back in $w_name)"
  done
}

worker_down() {
  worker_vars "$1"
  [[ -d $w_dir ]] || { lc_log "$w_name: nothing to remove"; return 0; }
  local pid h m
  if pid=$(lc_worker_init_pid "$w_k"); then
    kill -TERM "$pid"
    for _ in $(seq 100); do
      lc_worker_init_pid "$w_k" >/dev/null || break
      sleep 0.2
    done
    if lc_worker_init_pid "$w_k" >/dev/null; then
      lc_log "$w_name did not stop in 20s; killing it"
      kill -KILL "$pid"
    fi
  elif pid=$(unshare_pid); then
    # An init that up never found: --kill-child takes it along.
    kill -KILL "$pid"
  fi
  wait_init_gone
  # Its mounts go with the held mount namespace, once the loop devices its
  # kubelet held are detached; then its /dev.
  if mountpoint -q "$w_dir/mntns"; then
    detach_kubelet_loops
    umount "$w_dir/mntns"
  fi
  while read -r m; do
    [[ -z $m ]] || umount "$m" || umount -l "$m"
  done <<<"$(machine_mounts_below "$w_dir")"
  while cut_rules -C 2>/dev/null; do cut_rules -D; done
  # The route to its pods is on dpn0; deleting the veth deletes its peer, eth0.
  ! ip route show "$w_pod_cidr" | grep -q . || ip route delete "$w_pod_cidr"
  ! ip link show "$w_veth" >/dev/null 2>&1 || ip link delete "$w_veth"
  [[ ! -e /run/netns/$w_netns ]] || ip netns delete "$w_netns"
  for h in $(cgroup_hierarchies); do
    [[ ! -d $h/$w_cgroup ]] || find "$h/$w_cgroup" -depth -type d -exec rmdir {} +
  done
  [[ -z $(machine_mounts_below "$w_dir") ]] || lc_die "mounts left below $w_dir: $(machine_mounts_below "$w_dir" | tr '\n' ' ')"
  rm -rf --one-file-system "$w_dir" "$w_state"
  write_tsv
  lc_log "removed $w_name"
}

cmd_down() {
  (($#)) || usage
  local k
  for k; do worker_down "$k"; done
}

# --- exec, import, status

cmd_exec() {
  (($# >= 2)) || usage
  worker_vars "$1"
  shift
  local pid
  if pid=$(lc_worker_init_pid "$w_k"); then
    exec nsenter --target "$pid" --mount --uts --ipc --net --pid -- "$@"
  fi
  mountpoint -q "$w_dir/mntns" 2>/dev/null || lc_die "$w_name is not running"
  # Killed: its PID namespace is gone, and so is what its /proc showed; a
  # proc of the host's takes its place, so that /proc/self/mountinfo, mount
  # and ps work there again.
  nsenter --mount="$w_dir/mntns" -- sh -c '[ -e /proc/self ] || mount -t proc proc /proc'
  exec nsenter --mount="$w_dir/mntns" --net="/run/netns/$w_netns" -- "$@"
}

cmd_import() {
  (($#)) || usage
  local k archive
  mkdir -p "$lc_workers"
  for archive; do
    archive=$(readlink -f "$archive")
    [[ -f $archive ]] || lc_die "no image archive $archive"
    grep -qxF "$archive" "$w_imported" 2>/dev/null || echo "$archive" >>"$w_imported"
  done
  for k in $(lc_worker_ids); do
    lc_worker_init_pid "$k" >/dev/null || continue
    worker_vars "$k"
    lc_log "importing into $w_name"
    lc_import_images "$w_sock" "$@"
  done
}

cmd_status() {
  local k state ready zone instance
  printf '%-10s %-11s %-11s %-20s %-12s %s\n' NAME IP ZONE INSTANCE STATE NODE
  for k in $(lc_worker_ids); do
    worker_vars "$k"
    if lc_worker_init_pid "$k" >/dev/null; then state=running; else state=killed; fi
    ! cut_rules -C 2>/dev/null || state+=",cut"
    ready=$(lc_kubectl get node "$w_name" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null) || ready=absent
    read -r _ _ zone instance _ 2>/dev/null <"$w_dir/tsv" || zone=- instance=-
    printf '%-10s %-11s %-11s %-20s %-12s Ready=%s\n' "$w_name" "$w_ip" "$zone" "$instance" "$state" "$ready"
  done
}

(($#)) || usage
lc_require_root worker.sh
command=$1
shift
case $command in
  up) cmd_up "$@" ;;
  init) cmd_init "$@" ;;
  kill) cmd_kill "$@" ;;
  poweroff) cmd_poweroff "$@" ;;
  hang) cmd_hang "$@" ;;
  cut) cmd_cut "$@" ;;
  uncut) cmd_uncut "$@" ;;
  down) cmd_down "$@" ;;
  exec) cmd_exec "$@" ;;
  import) cmd_import "$@" ;;
  status) cmd_status ;;
  *) usage ;;
esac
