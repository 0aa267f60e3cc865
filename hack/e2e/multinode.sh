#!/usr/bin/env bash
# make e2e-multinode: Diskplane where volumes meet several nodes. Brings up
# (or reuses) the multi-node local cluster, NODES workers (default 3) in two
# zones, each worker an EC2 instance of the emulator that sees only its own
# volumes; installs Diskplane with Helm (hack/e2e/incluster.sh helm install);
# then runs the scenarios of tests/e2e/multinode and the External Storage
# suite's multi-node specs (hack/e2e/external.sh multinode). The cluster stays up
# afterwards, as after make e2e; make demo-down removes it. Needs root.
#
# Settings (besides hack/e2e/lib.sh's):
#   E2E_MULTINODE_RUN      a -run regexp: only those scenarios (empty: all)
#   E2E_MULTINODE_EXTERNAL 1 (default) also runs the External Storage specs;
#                          0 skips them (CI runs them in its own step)
#   E2E_MULTINODE_PROFILE  full (default) or ci: full also waits out
#                          Kubernetes' six-minute forced detach of a dead node
#   E2E_FLAGS              go test flags (default: as in the Makefile)
set -euo pipefail
export NODES=${NODES:-3}
source "$(dirname "$0")/lib.sh"
lc_require_root "hack/e2e/multinode.sh"
((NODES >= 3)) || lc_die "NODES=$NODES: the scenarios need three workers or more"
export E2E_MULTINODE_PROFILE=${E2E_MULTINODE_PROFILE:-full}
case $E2E_MULTINODE_PROFILE in full | ci) ;; *) lc_die "E2E_MULTINODE_PROFILE=$E2E_MULTINODE_PROFILE: want full or ci" ;; esac
E2E_FLAGS=${E2E_FLAGS:--count=1 -timeout=40m -parallel=4 -v}

start=$SECONDS
external=${E2E_MULTINODE_EXTERNAL:-1}
((external == 0)) || "$lc_here/build.sh" e2e
"$e2e_here/incluster.sh" helm install
lc_log "multi-node cluster with Diskplane ready in $((SECONDS - start))s; running tests/e2e/multinode ($E2E_MULTINODE_PROFILE)"
# The scenarios kill and restart workers: they run one at a time.
rc=0
# shellcheck disable=SC2086 # E2E_FLAGS is a list of flags
(cd "$lc_repo" && KUBECONFIG=$lc_kubeconfig DRIVER_NAME=$DRIVER_NAME E2E_NODE_LINK_DIR=$e2e_node_links \
  CGO_ENABLED=1 go test -race -tags e2e_multinode $E2E_FLAGS -parallel=1 \
  ${E2E_MULTINODE_RUN:+-run "$E2E_MULTINODE_RUN"} ./tests/e2e/multinode) || rc=$?
((external == 0)) || "$e2e_here/external.sh" multinode
exit "$rc"
