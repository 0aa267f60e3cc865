#!/usr/bin/env bash
# CI's check that make demo run a second time keeps what the first one made:
# the same app pod (UID, no restart), its data, and a node without the
# startup taint (the first version of the in-cluster demo tainted the node
# again, which evicted the pod and kept it pending forever). Run after make
# demo; needs root.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
lc_require_root "hack/e2e/demo-again.sh"
pod=app

pod_state() { lc_kubectl get pod "$pod" -o jsonpath='{.metadata.uid} {.status.containerStatuses[0].restartCount}'; }
before=$(pod_state) || lc_die "no pod $pod: run make demo first"
first_line=$(lc_kubectl exec "$pod" -- head -n 1 /data/out.txt)
"$e2e_here/demo.sh"
after=$(pod_state)
[[ $after == "$before" ]] || lc_die "pod $pod changed across make demo: uid/restarts $before -> $after"
[[ $(lc_kubectl exec "$pod" -- head -n 1 /data/out.txt) == "$first_line" ]] ||
  lc_die "pod $pod's /data/out.txt lost its first line"
taints=$(lc_kubectl get nodes -o jsonpath='{.items[*].spec.taints[*].key}')
[[ " $taints " != *" $DRIVER_NAME/agent-not-ready "* ]] || lc_die "the node has the startup taint again: $taints"
lc_log "make demo again kept pod $pod (uid and restarts $after), its data, and the node untainted"
