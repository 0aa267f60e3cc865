#!/usr/bin/env bash
# Workload identity with real tokens: the local Kubernetes cluster's API
# server (hack/local-cluster, brought up when it is not running) issues the
# pods' service-account tokens (TokenRequest, bound to pods), and the node
# VM runs the production node path with them (hack/vm/nvme.sh, only the
# TestWorkloadIdentity scenario of tests/vm): the emulator's STS verifies
# each token against the cluster's own keys, KMS unwraps the volume's key
# for the pod's role, the node opens the LUKS2 volume on Debian's kernel.
# Pods the trust policy or the key policy refuse get PermissionDenied with
# nothing opened, and a role revoked while its pod runs is refused at the
# next republish while the mount stays.
#
# Needs root and the cluster's binaries (hack/local-cluster/build.sh). The
# cluster is left running; make demo-down takes it down.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
vm_repo_dir=$(cd "$here/../.." && pwd)
# shellcheck source=hack/local-cluster/lib.sh
source "$here/../local-cluster/lib.sh"
lc_require_root hack/vm/identity.sh

start=$SECONDS
if ! lc_kubectl get --raw /readyz >/dev/null 2>&1; then
  lc_log "bringing up the local cluster"
  "$lc_here/up.sh" >/dev/null
fi
lc_log "cluster ready after $((SECONDS - start)) s"
# A directory and host ports of its own: make test-vm may boot its VM meanwhile.
PATH=$lc_bin:$PATH VM_KUBECONFIG=$lc_kubeconfig VM_NVME_RUN='^TestWorkloadIdentity$' \
  VM_DIR=${VM_DIR:-$vm_repo_dir/_output/vm-identity} VM_PORT_BASE=${VM_PORT_BASE:-18800} "$here/nvme.sh"
lc_log "workload identity in the VM: done after $((SECONDS - start)) s"
