# shellcheck shell=bash disable=SC2034 # the scripts that source this use the paths
# Shared by build.sh, up.sh, down.sh, worker.sh and driver.sh: where things
# live, and the careful start/stop of host processes. Source it; it defines no
# side effects.
#
# Every path can be moved with LOCAL_CLUSTER_DIR (default
# <repo>/_output/local-cluster, git-ignored):
#   bin/      binaries built by build.sh (kept between runs)
#   images/   image archives built by build.sh (docker-archive tars)
#   crds/     VolumeSnapshot CRDs copied from the pinned client/v8 module
#   stamps/   build cache keys, one per build step
#   run/      everything up.sh creates: pki, logs, pids, etcd data,
#             containerd root, CNI config, the machine snapshot down.sh uses

lc_here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
lc_repo=$(cd "$lc_here/../.." && pwd)
LOCAL_CLUSTER_DIR=${LOCAL_CLUSTER_DIR:-$lc_repo/_output/local-cluster}
lc_bin=$LOCAL_CLUSTER_DIR/bin
lc_images=$LOCAL_CLUSTER_DIR/images
lc_crds=$LOCAL_CLUSTER_DIR/crds
lc_stamps=$LOCAL_CLUSTER_DIR/stamps
lc_run=$LOCAL_CLUSTER_DIR/run
lc_pki=$lc_run/pki
lc_logs=$lc_run/logs
lc_pids=$lc_run/pids
lc_kubeconfig=$lc_pki/admin.kubeconfig
# containerd's state (sockets, shim and runc state) lives on /run, a tmpfs, so a
# reboot cannot leave stale state behind; the unix socket path must stay short.
lc_state=/run/diskplane-local-cluster
lc_containerd_sock=$lc_state/containerd.sock
# The kubelet keeps its default root: CSI plugins and the plugin registry are
# found under it (/var/lib/kubelet/plugins/<driver>/csi.sock).
lc_kubelet_dir=/var/lib/kubelet
# The CNI network name; host-local keeps its IP leases under
# /var/lib/cni/networks/<name>.
lc_cni_name=diskplane-local
lc_cni_bridge=dpl0
lc_pod_cidr=10.244.0.0/24
lc_service_cidr=10.96.0.0/16

# Multi-node mode (WORKERS=N up.sh, worker.sh): worker k runs its containerd,
# kubelet and kube-proxy in namespaces of its own; everything of it lives in
# run/workers/k/ (and lc_state/worker-k for containerd's sockets), and
# run/workers.tsv describes the workers for other scripts. The host reaches
# the workers through the bridge dpn0 (10.89.0.1); worker k is 10.89.0.(10+k)
# in network namespace dpw-k, behind the veth dpv-k, with pods in 10.244.k.0/24
# and pod cgroups below /diskplane-worker-k.
lc_workers=$lc_run/workers
lc_workers_tsv=$lc_run/workers.tsv
lc_worker_bridge=dpn0
lc_worker_net=10.89.0
lc_worker_netns=dpw-
lc_worker_veth=dpv-
lc_worker_cgroup=diskplane-worker-
# Worker addresses 10.89.0.11-.250 and pod networks 10.244.1-240.0/24.
lc_max_workers=240

lc_log() { printf '%s %s\n' "$(date +%H:%M:%S)" "$*"; }
lc_die() { printf 'error: %s\n' "$*" >&2; exit 1; }

lc_require_root() {
  [[ $(id -u) -eq 0 ]] || lc_die "$1 needs root (mounts, cgroups, iptables, containerd)"
}

# lc_start NAME BINARY ARGS... starts BINARY in the background, in a session of
# its own (so that a signal to the caller's process group, e.g. from timeout
# or Ctrl-C, does not take the cluster down with it), with its output in
# run/logs/NAME.log (the previous run's log becomes NAME.log.prev). It records "PID EXE" in run/pids/NAME.pid, where EXE is
# the resolved path of the binary, so that lc_stop can tell the process it
# started from an unrelated one that reused the PID. (A background job of a
# script is no process group leader, so setsid execs in place: same PID.)
lc_start() {
  local name=$1 exe
  shift
  exe=$(readlink -f "$(command -v "$1")") || lc_die "$1: not found"
  mkdir -p "$lc_logs" "$lc_pids"
  [[ ! -f $lc_logs/$name.log ]] || mv "$lc_logs/$name.log" "$lc_logs/$name.log.prev"
  setsid "$@" >"$lc_logs/$name.log" 2>&1 </dev/null &
  local pid=$!
  echo "$pid $exe" >"$lc_pids/$name.pid"
  # Until the fork has exec'd the binary, /proc/PID/exe is still bash: wait
  # for the exec (or the exit), so that lc_pid_alive is right from now on.
  for _ in $(seq 100); do
    lc_pid_alive "$name" || ! kill -0 "$pid" 2>/dev/null && break
    sleep 0.05
  done
}

# lc_pid_alive NAME succeeds when the process recorded for NAME still runs the
# binary it was started with.
lc_pid_alive() {
  local file=$lc_pids/$1.pid pid exe
  [[ -f $file ]] || return 1
  read -r pid exe <"$file"
  [[ -n $pid && -n $exe ]] || return 1
  # A binary rebuilt while it runs shows as "EXE (deleted)": still ours.
  case $(readlink "/proc/$pid/exe" 2>/dev/null) in
    "$exe" | "$exe (deleted)") return 0 ;;
    *) return 1 ;;
  esac
}

# lc_stop NAME stops the process recorded for NAME: SIGTERM, up to 15 s of
# grace, then SIGKILL. It signals only while /proc/PID/exe is still the binary
# it started (PIDs are reused); a stale record is just removed.
lc_stop() {
  local name=$1 file=$lc_pids/$1.pid pid exe
  [[ -f $file ]] || return 0
  read -r pid exe <"$file"
  if lc_pid_alive "$name"; then
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 75); do
      lc_pid_alive "$name" || break
      sleep 0.2
    done
    if lc_pid_alive "$name"; then
      lc_log "$name (pid $pid) ignored SIGTERM; sending SIGKILL"
      kill -KILL "$pid" 2>/dev/null || true
      for _ in $(seq 25); do
        lc_pid_alive "$name" || break
        sleep 0.2
      done
    fi
    lc_log "stopped $name (pid $pid)"
  fi
  rm -f "$file"
}

# lc_wait WHAT SECONDS CMD... polls CMD once a second until it succeeds; on
# timeout it names WHAT and fails.
lc_wait() {
  local what=$1 timeout=$2 start=$SECONDS
  shift 2
  until "$@" >/dev/null 2>&1; do
    ((SECONDS - start < timeout)) || { echo "timed out after ${timeout}s waiting for $what" >&2; return 1; }
    sleep 1
  done
  lc_log "$what after $((SECONDS - start))s"
}

# lc_import_images SOCKET [ARCHIVE...] imports image archives (default: every
# one build.sh made) into the k8s.io namespace, the kubelet's, of the
# containerd listening on SOCKET. An OCI image index archive (*.oci.tar,
# make release's) is named by its digest too, repository@sha256:..., as a
# pull by digest names it: a chart that pins the digest finds it.
lc_import_images() {
  local socket=$1 archive names=() ref by_digest
  shift
  (($#)) || set -- "$lc_images"/*.tar
  for archive; do
    by_digest=()
    if [[ $archive == *.oci.tar ]]; then
      ref=$(tar -xOf "$archive" index.json | jq -r '.manifests[0].annotations["org.opencontainers.image.ref.name"] // empty')
      [[ $ref == */*:* ]] || lc_die "$archive: its index.json names no image (<repository>:<tag>), got \"$ref\""
      by_digest=(--digests --base-name "${ref%:*}")
    fi
    ctr --address "$socket" --namespace k8s.io images import "${by_digest[@]}" "$archive" >/dev/null
    names+=("$(basename "$archive")")
  done
  lc_log "images imported: ${names[*]}"
}

# lc_kubectl runs the kubectl build.sh made (same release as the cluster), or
# the one on PATH, against the local cluster.
lc_kubectl() { "$(lc_kubectl_path)" --kubeconfig="$lc_kubeconfig" "$@"; }

lc_kubectl_path() {
  if [[ -x $lc_bin/kubectl ]]; then echo "$lc_bin/kubectl"; else command -v kubectl; fi
}

# lc_worker_ids lists the numbers of the workers worker.sh created and has not
# removed (running or killed), in order.
lc_worker_ids() {
  local d
  for d in "$lc_workers"/[0-9]*; do
    [[ -d $d ]] && basename "$d"
  done | sort -n
}

# lc_worker_init_pid K prints the host PID of worker K's init (PID 1 of its
# PID namespace) and succeeds while it runs. worker.sh records the PID with
# its PID namespace: a reused PID is in another namespace.
lc_worker_init_pid() {
  local pid ns
  read -r pid ns _ 2>/dev/null <"$lc_workers/$1/init" || return 1
  [[ -n $pid && $(readlink "/proc/$pid/ns/pid" 2>/dev/null) == "$ns" ]] || return 1
  echo "$pid"
}
