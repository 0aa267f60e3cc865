#!/usr/bin/env bash
# make demo: Diskplane installed the way a user installs it, in a real
# single-node Kubernetes cluster on this machine, with the EC2 emulator as
# the cloud. hack/e2e/incluster.sh helm install brings up the cluster (its
# node registered with Diskplane's startup taint), the emulator as the node's
# instance, builds the images from our Dockerfile, imports them and runs
# helm install charts/diskplane with hack/chart/values-local-cluster.yaml,
# which also makes the StorageClass diskplane-gp3. Then the claim and pod of
# examples/dynamic-provisioning go into the default namespace; the demo waits
# for the pod and shows what happened: the Kubernetes objects, the EC2 volume
# as the emulator sees it, and the pod's df of the volume.
# Running it again reuses what runs. make demo-down removes everything.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
lc_require_root "make demo"
start=$SECONDS
example=$lc_repo/examples/dynamic-provisioning
namespace=kube-system
pod=app claim=diskplane-claim

"$e2e_here/incluster.sh" helm install
# The chart made the StorageClass (the same as the example's): only the
# claim and the pod.
lc_kubectl apply -f "$example/pvc.yaml" -f "$example/pod.yaml"
lc_log "waiting for pod $pod (scheduling, provisioning, attaching, formatting, mounting)"
if ! lc_kubectl wait --for=condition=Ready "pod/$pod" --timeout=300s >/dev/null; then
  lc_kubectl describe pod "$pod" >&2 || true
  lc_kubectl describe pvc "$claim" >&2 || true
  lc_kubectl -n "$namespace" logs deployment/diskplane-controller --all-containers --tail=50 >&2 || true
  lc_die "pod $pod is not ready; the emulator's log is $lc_logs/emulator.log"
fi
volume=$(lc_kubectl get pvc "$claim" -o jsonpath='{.spec.volumeName}')
volume_id=$(lc_kubectl get pv "$volume" -o jsonpath='{.spec.csi.volumeHandle}')

section() { printf '\n=== %s\n' "$*"; }
section "kubectl -n $namespace get pods -l app.kubernetes.io/name=diskplane (Diskplane, installed with Helm)"
lc_kubectl -n "$namespace" get pods -l app.kubernetes.io/name=diskplane -o wide
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
  kubectl -n $namespace logs deployment/diskplane-controller -c diskplane
  kubectl -n $namespace logs daemonset/diskplane-node -c diskplane
  _output/tools/helm --kubeconfig $lc_kubeconfig -n $namespace upgrade diskplane charts/diskplane \\
    --reuse-values --set controller.logLevel=5   # or list, status, uninstall
The emulator's log: $lc_logs/emulator.log
Tear everything down with: make demo-down
EOF
