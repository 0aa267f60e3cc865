#!/usr/bin/env bash
# make demo: a real single-node Kubernetes cluster with Diskplane and the EC2
# emulator (hack/e2e/up.sh), then examples/dynamic-provisioning applied in the
# default namespace: a StorageClass, a claim and a pod that writes to its
# volume. Waits for the pod and shows what happened: the Kubernetes objects,
# the EC2 volume as the emulator sees it, and the pod's df of the volume.
# Running it again reuses what runs. make demo-down removes everything.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
lc_require_root "make demo"
start=$SECONDS
example=$lc_repo/examples/dynamic-provisioning
pod=app claim=diskplane-claim

"$e2e_here/up.sh"
lc_kubectl apply -f "$example"
lc_log "waiting for pod $pod (scheduling, provisioning, attaching, formatting, mounting)"
if ! lc_kubectl wait --for=condition=Ready "pod/$pod" --timeout=300s >/dev/null; then
  lc_kubectl describe pod "$pod" >&2 || true
  lc_kubectl describe pvc "$claim" >&2 || true
  lc_die "pod $pod is not ready; the driver's logs are in $lc_logs/driver-*.log, the emulator's in $lc_logs/emulator.log"
fi
volume=$(lc_kubectl get pvc "$claim" -o jsonpath='{.spec.volumeName}')
volume_id=$(lc_kubectl get pv "$volume" -o jsonpath='{.spec.csi.volumeHandle}')

section() { printf '\n=== %s\n' "$*"; }
section "kubectl get sc,pvc,pv,pod"
lc_kubectl get "sc/diskplane-gp3" "pvc/$claim" "pv/$volume" "pod/$pod" -o wide
section "the EC2 volume $volume_id, as the emulator sees it (ec2-emulator describe-volumes)"
"$e2e_emulator" describe-volumes --admin="http://$e2e_admin_listen" | awk -v id="$volume_id" 'NR == 1 || $1 == id'
section "kubectl exec $pod -- df -h /data"
lc_kubectl exec "$pod" -- df -h /data
section "kubectl exec $pod -- tail -n 3 /data/out.txt"
lc_kubectl exec "$pod" -- tail -n 3 /data/out.txt

cat <<EOF

Diskplane demo ready in $((SECONDS - start))s. Try it yourself:
  export KUBECONFIG=$lc_kubeconfig PATH=$lc_bin:\$PATH
  kubectl get pvc,pv,volumeattachments
  $e2e_emulator describe-volumes
  kubectl apply -f examples/snapshot/        # more in examples/*/README.md
Logs: $lc_logs (driver-plugin.log, driver-csi-*.log, emulator.log)
Tear everything down with: make demo-down
EOF
