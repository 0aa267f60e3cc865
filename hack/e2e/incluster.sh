#!/usr/bin/env bash
# make e2e-helm, make e2e-kustomize: Diskplane installed into the local
# cluster the way a user installs it, from the images built here, and tested
# there. Unlike make e2e, no Diskplane host process runs: the controller is
# the chart's Deployment, the node plugin its DaemonSet; only the EC2
# emulator stays a host process, which the pods reach on the node's address.
#
#   hack/e2e/incluster.sh helm [install]        helm install charts/diskplane
#   hack/e2e/incluster.sh kustomize [install]   kubectl apply -k hack/e2e/kustomize
# With "install" it stops after the install step: Diskplane runs in the
# cluster, ready to try (kubectl apply -f examples/...). That is make demo's
# first half; run again, it reuses the cluster and emulator and upgrades the
# install in place (helm upgrade --install, kubectl apply -k).
#
# Steps, each timed and summed up at the end:
#   cluster    the local cluster (hack/local-cluster), its node registered
#              with Diskplane's startup taint <driver>/agent-not-ready:NoExecute
#   emulator   the EC2 emulator as the node's instance, its EC2 and IMDS
#              listeners on every address, the volumes' by-id links below /dev
#              (the node plugin's pod sees the host's /dev)
#   images     make image, make image-sidecars, make image-import
#   install    the install command; then the controller Deployment and node
#              DaemonSet are ready and the node's CSINode lists the driver
#   installed  tests/e2e/install TestInstalled: the plugin removed the startup
#              taint, the admission policies hold (the startup taint's, and
#              the one for csi-proxy's pipes of the Windows DaemonSet the
#              suites install too), the pods serve
#   e2e        the tests/e2e suite, unchanged, against the in-cluster driver
#   upgrade    (helm) TestUpgrade: helm upgrade with other values rolls the
#              controller and the node plugin under a pod that keeps its volume
#   failover   TestLeaderFailover: two controller replicas; the leader evicted,
#              the PodDisruptionBudget refuses the second eviction, the leases
#              move, the new leaders provision and attach
#   drain      TestDrain: the node cordoned, its node plugin stopped and a pod
#              with a volume evicted; the plugin's preStop hook waits until the
#              volume is unmounted and detached, long before six minutes
#   chaos      (helm) TestClaimsUnderChaos: claims with pods while the leading
#              controller pod is force-deleted again and again and 5 % of EC2
#              calls fail; every pod runs, every deleted claim leaves no EC2
#              volume (E2E_CHAOS=full: 100 claims, 10 kills; default ci: 24, 3)
#   uninstall  TestUninstall: helm uninstall / kubectl delete -k, then no
#              object of Diskplane is left
# A failing e2e suite does not stop the upgrade and uninstall steps; any
# failure makes the exit code non-zero. The cluster and the emulator stay up
# (make demo-down removes them), as after make e2e.
#
# E2E_CHART installs a packaged chart instead of charts/diskplane (Helm
# only): CI gives it make release's _output/release/diskplane.tgz, so that
# the chart a user downloads is the one installed and tested. Its plugin
# image is pinned by digest: the images step also imports the image index
# released beside it (diskplane-index.oci.tar) under
# <repository>@<digest>, as a pull by digest names it, and TestInstalled
# checks that the plugin's pods run exactly that image. The upgrade and
# failover steps then upgrade to this tree's chart and images, as a user
# moving off that release would.
#
# Settings: see hack/e2e/lib.sh; E2E_FLAGS (go test flags of the suites,
# default as in the Makefile); E2E_RUN (a -run regexp: only those tests of
# tests/e2e; empty runs them all); E2E_SKIP (steps not to run, of upgrade,
# failover, drain and chaos: CI's kustomize run skips what the Helm run
# proved on the same rendered objects). Needs root.
# shellcheck disable=SC2317 # the steps' functions run through step()
set -euo pipefail
# Where the node plugin finds the by-id links of attached volumes: a
# directory of its own below /dev, which the node plugin's pod mounts from
# its node, and which never mixes with the machine's /dev/disk/by-id.
# hack/e2e/kustomize says the same. On the single node the emulator links
# there itself; in a multi-node cluster (NODES > 1) it links each volume in
# its worker's /dev only and keeps its own links in its data directory.
links=/dev/diskplane-e2e-by-id
export E2E_NODE_LINK_DIR=$links
(("${NODES:-1}" > 1)) || export E2E_DEVICE_LINK_DIR=$links
# The emulator's EC2 and IMDS listeners on every address: the pods dial the
# node's (hack/chart/values-local-cluster.yaml's $(HOST_IP)), or on the
# workers of a multi-node cluster the bridge's (values-multinode.yaml).
export E2E_EMULATOR_LISTEN=0.0.0.0
source "$(dirname "$0")/lib.sh"
lc_require_root "hack/e2e/incluster.sh"

for s in ${E2E_SKIP:-}; do
  case $s in
    upgrade | failover | drain | chaos) ;;
    *) lc_die "E2E_SKIP=$E2E_SKIP: $s is not a step that can be skipped (upgrade failover drain chaos)" ;;
  esac
done

method=${1:-}
only_install=0
case $method:${2:-} in
  helm: | kustomize:) ;;
  helm:install | kustomize:install) only_install=1 ;;
  *) lc_die "usage: hack/e2e/incluster.sh helm|kustomize [install]" ;;
esac
# The kustomize overlay points the pods at their node's address, which the
# workers of a multi-node cluster do not serve the emulator on.
[[ $method == helm ]] || ((NODES == 1)) || lc_die "a multi-node cluster (NODES=$NODES) is installed with Helm only"

namespace=kube-system
release=diskplane
chart=$lc_repo/charts/diskplane
pinned_index='' pinned_image=''
if [[ -n ${E2E_CHART:-} ]]; then
  [[ $method == helm ]] || lc_die "E2E_CHART=$E2E_CHART: a packaged chart is installed with Helm only"
  chart=$(readlink -f "$E2E_CHART") || lc_die "E2E_CHART=$E2E_CHART: no such chart"
  [[ -f $chart && $chart == *.tgz ]] || lc_die "E2E_CHART=$E2E_CHART: not a packaged chart (.tgz); run make release first"
  pinned_index=$(dirname "$chart")/diskplane-index.oci.tar
  [[ -f $pinned_index ]] || lc_die "$pinned_index: the image index released with $chart is missing"
  pinned_image=$(tar -xzOf "$chart" diskplane/values.yaml | awk '
    /^image:/ { plugin = 1; next }
    plugin && /^[^ #]/ { plugin = 0 }
    plugin && /^  repository:/ { repo = $2 }
    plugin && /^  digest:/ { gsub(/"/, "", $2); digest = $2 }
    END { if (repo != "" && digest != "") print repo "@" digest }')
  [[ $pinned_image == *@sha256:* ]] || lc_die "$chart pins no plugin image by digest (image.repository, image.digest)"
  index_digest=$(tar -xOf "$pinned_index" index.json | jq -r '.manifests[0].digest')
  [[ $pinned_image == *"@$index_digest" ]] ||
    lc_die "$chart pins $pinned_image, not the image index released beside it ($index_digest)"
fi
overlay=$e2e_here/kustomize
taint=$DRIVER_NAME/agent-not-ready
E2E_FLAGS=${E2E_FLAGS:--count=1 -timeout=40m -parallel=4 -v}
helm=$lc_repo/_output/tools/helm
lc_helm() { "$helm" --kubeconfig "$lc_kubeconfig" "$@"; }

summary=()
failed=0
# step NAME CMD... runs CMD in a subshell with errexit (so that any failing
# command or lc_die ends the step, not the script), timing it, and records
# the outcome in the summary and in step_ok (1 or 0). Call it as a plain
# command, never inside a condition (if, ||, &&, !): bash ignores errexit in
# everything a condition runs, subshells included, so a command failing in
# the middle of CMD would go unnoticed (a failed image build once did).
step() {
  local name=$1 start=$SECONDS rc
  shift
  lc_log "=== $name"
  set +e
  (
    set -e
    "$@"
  )
  rc=$?
  set -e
  if ((rc == 0)); then
    summary+=("PASS $name ($((SECONDS - start))s)")
    step_ok=1
  else
    summary+=("FAIL $name ($((SECONDS - start))s)")
    failed=1 step_ok=0
  fi
}
# wanted STEP succeeds unless E2E_SKIP names STEP, which the summary then
# lists as skipped.
wanted() {
  [[ " ${E2E_SKIP:-} " == *" $1 "* ]] || return 0
  summary+=("SKIP $1 (E2E_SKIP)")
  return 1
}
finish() {
  echo
  lc_log "in-cluster ($method) summary:"
  printf '  %s\n' "${summary[@]}"
  exit "$failed"
}

node_names() { lc_kubectl get nodes -o jsonpath='{.items[*].metadata.name}'; }
node_ip() { lc_kubectl get nodes -o jsonpath='{.items[0].status.addresses[?(@.type=="InternalIP")].address}'; }
node_taints() { lc_kubectl get node "$1" -o jsonpath='{.spec.taints[*].key}'; }

cluster() {
  e2e_require_binaries
  "$lc_repo/hack/install-deps.sh" cluster
  "$lc_here/build.sh" cluster sidecars
  # A Diskplane host process and an in-cluster one would both register the
  # same driver with the kubelet.
  ! lc_pid_alive driver-plugin || lc_die "Diskplane runs as a host process (make e2e / make e2e-external); run make demo-down first"
  NODE_TAINTS="$taint:NoExecute" e2e_cluster_up
  # make demo run again keeps the install it finds (and the node without its
  # startup taint, which the plugin removed: tainting it again would evict
  # the pods that use volumes); the suites need a cluster without one.
  if ((only_install)) && [[ -n $(e2e_installed) ]]; then
    lc_log "Diskplane is installed already: upgrading it in place"
    return 0
  fi
  e2e_require_not_installed
  # A cluster that was already up has nodes registered without the taint:
  # add it, as a node group's launch settings would have.
  local node
  for node in $(node_names); do
    if [[ " $(node_taints "$node") " != *" $taint "* ]]; then
      lc_log "node $node has no startup taint (the cluster was up already): adding $taint:NoExecute"
      lc_kubectl taint node "$node" "$taint:NoExecute"
    fi
    lc_log "node $node has taints: $(node_taints "$node")"
  done
}

emulator() {
  local want=$links
  e2e_multinode && want=$e2e_emulator_dir/by-id
  if lc_pid_alive emulator; then
    [[ $e2e_links == "$want" ]] ||
      lc_die "the running emulator links volumes in $e2e_links, not $want where this cluster needs them; run make demo-down first"
  fi
  # A record left by an emulator that no longer runs does not count.
  e2e_links=$want
  e2e_emulator_up
  if e2e_multinode; then
    # Each worker must be answered as its own instance.
    local name ip zone id rest got
    while IFS=$'\t' read -r name ip zone id rest; do
      [[ -z $name || $name == \#* ]] && continue
      got=$("$lc_here/worker.sh" exec "${name#worker-}" curl -fsS "http://$e2e_worker_gateway:8701/latest/meta-data/instance-id") ||
        lc_die "the emulator's IMDS does not answer $name on $e2e_worker_gateway:8701"
      [[ $got == "$id" ]] || lc_die "the emulator's IMDS answers $name ($ip) as $got, not its instance $id"
    done <"$lc_workers_tsv"
    return 0
  fi
  local ip
  ip=$(node_ip)
  [[ -n $ip ]] || lc_die "the node reports no InternalIP"
  curl -fsS -o /dev/null "http://$ip:8701/latest/meta-data/instance-id" ||
    lc_die "the emulator's IMDS does not answer on the node's address $ip:8701 (started by make e2e on 127.0.0.1 only?); run make demo-down first"
}

images() {
  "$lc_repo/hack/image/build.sh"
  "$lc_repo/hack/image/sidecars.sh"
  "$lc_repo/hack/image/import.sh"
  [[ -z $pinned_index ]] || "$lc_repo/hack/image/import.sh" "$pinned_index"
}

controller_ready() {
  lc_kubectl -n "$namespace" rollout status deployment/diskplane-controller --timeout=2s
}
node_ready() {
  lc_kubectl -n "$namespace" rollout status daemonset/diskplane-node --timeout=2s
}

install() {
  local start=$SECONDS
  case $method in
    helm)
      "$lc_repo/hack/chart/helm.sh" >/dev/null
      # The suites test a fresh install; install-only (make demo) takes the
      # release that is there and upgrades it to this tree's chart.
      local verb=(install)
      if ((only_install)); then
        verb=(upgrade --install)
      elif lc_helm status "$release" -n "$namespace" >/dev/null 2>&1; then
        lc_die "Helm release $release exists already in $namespace; helm uninstall it or run make demo-down"
      fi
      # The suites also install the Windows node DaemonSet (no pod: the
      # cluster has no Windows node) for its admission policy, which
      # TestInstalled checks, with one more account allowed by value.
      local windows=()
      ((only_install)) || windows=(--set node.windows.enabled=true
        --set "node.windows.pipeAdmissionPolicy.allowedServiceAccounts={default/diskplane-e2e-pipes}")
      local multinode=()
      e2e_multinode && multinode=(-f "$lc_repo/hack/chart/values-multinode.yaml")
      lc_helm "${verb[@]}" "$release" "$chart" --namespace "$namespace" \
        -f "$lc_repo/hack/chart/values-local-cluster.yaml" "${multinode[@]}" \
        --set controller.logLevel=4 --set node.logLevel=4 \
        --set "node.additionalArgs={--device-link-dir=$links}" "${windows[@]}"
      ;;
    kustomize)
      ((only_install)) || ! lc_kubectl get csidriver "$DRIVER_NAME" >/dev/null 2>&1 ||
        lc_die "CSIDriver $DRIVER_NAME exists already: Diskplane is installed; remove it or run make demo-down"
      lc_kubectl apply -k "$overlay"
      ;;
  esac
  lc_wait "controller Deployment ready" 300 controller_ready || return 1
  lc_wait "node DaemonSet ready" 300 node_ready || return 1
  lc_wait "driver $DRIVER_NAME registered on every node" 120 e2e_driver_registered || return 1
  lc_log "Diskplane ready $((SECONDS - start))s after the $method install command started"
}

go_test() {
  local tags=$1
  shift
  # shellcheck disable=SC2086 # E2E_FLAGS is a list of flags
  (cd "$lc_repo" && KUBECONFIG=$lc_kubeconfig HELM=$helm E2E_KUSTOMIZE_DIR=$overlay DRIVER_NAME=$DRIVER_NAME \
    E2E_PINNED_IMAGE=$pinned_image CGO_ENABLED=1 go test -race -tags "$tags" $E2E_FLAGS "$@")
}

for s in cluster emulator images install; do
  step "$s" "$s"
  ((step_ok)) || finish
done
if ((only_install)); then
  lc_log "Diskplane runs in the cluster. export KUBECONFIG=$lc_kubeconfig PATH=$lc_bin:\$PATH; make demo-down removes everything"
  finish
fi
step installed go_test e2e_install -run '^TestInstalled$' ./tests/e2e/install
step e2e go_test e2e ${E2E_RUN:+-run "$E2E_RUN"} ./tests/e2e/...
if [[ $method == helm ]] && wanted upgrade; then
  step upgrade go_test e2e_install -run '^TestUpgrade$' ./tests/e2e/install
fi
if wanted failover; then
  step failover go_test e2e_install -run '^TestLeaderFailover$' ./tests/e2e/install
fi
if wanted drain; then
  step drain go_test e2e_install -run '^TestDrain$' ./tests/e2e/install
fi
if [[ $method == helm ]] && wanted chaos; then
  step chaos go_test e2e_install -run '^TestClaimsUnderChaos$' ./tests/e2e/install
fi
step uninstall go_test e2e_install -run '^TestUninstall$' ./tests/e2e/install
finish
