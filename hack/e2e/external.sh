#!/usr/bin/env bash
# Runs Kubernetes' own storage end-to-end suite ("External Storage") against
# Diskplane in the local cluster: e2e.test (built by
# hack/local-cluster/build.sh e2e) with tests/e2e/testdriver.yaml, in
# parallel Ginkgo processes. Expects hack/e2e/up.sh external to have run
# (make e2e-external does both).
#
#   hack/e2e/external.sh [full|ci|multinode]
#     full  every External Storage spec but those tests/e2e/README.md lists as
#           skipped, and why (the default)
#     ci    the subset .ci/run runs: one spec of each suite that matters to
#           Diskplane (see CI_FOCUS below)
#     multinode  the specs that need several nodes or zones, in the
#           multi-node cluster with Diskplane installed by Helm (make
#           e2e-multinode runs them after its scenarios)
#
# Environment:
#   PROCS     (4) parallel Ginkgo processes; the specs mostly wait for the
#             cluster, so more processes than cores pay off
#   FOCUS, SKIP   override the profile's regular expressions
#   TIMEOUT   (3h full, 40m ci) the whole suite's deadline
#
# Output: _output/e2e/external-<profile>/ holds the full log (ginkgo.log),
# Ginkgo's JSON report, summary.txt (the numbers and every failed spec,
# also printed at the end) and skipped.txt (each spec the suite skipped at
# run time, with its reason).
set -euo pipefail
source "$(dirname "$0")/lib.sh"

profile=${1:-full}
# Every spec of the suite for Diskplane carries "[Driver: <name>]" (the text
# "External Storage" alone would also match the suite's description, which
# Ginkgo matches too, and so select e2e.test's other specs).
driver_specs='External Storage \[Driver: ebs\.csi\.diskplane\.io\]'
# Specs that can never pass here or that the suite's own authors mark as
# unreliable or destructive; each is explained in tests/e2e/README.md.
base_skip='\[Disruptive\]|\[Flaky\]|should not mount / map unused volumes'
base_skip+='|Dynamic PV \(block volmode\)\] multiVolume.*should concurrently access the single volume from pods on the same node'
base_skip+='|provisioning should provision storage with any volume data source'
case $profile in
  full)
    focus=$driver_specs
    skip=$base_skip
    timeout=3h
    ;;
  ci)
    # One spec per suite that exercises a different part of Diskplane:
    # filesystem and block I/O, exec, fsGroup-free ownership, topology,
    # online expansion, snapshot restore, clone, VolumeAttributesClass,
    # multiple pods, ReadWriteOncePod, ext4 through its own pattern.
    focus="$driver_specs.*("
    focus+='Dynamic PV \(default fs\)\] volumes should store data'
    focus+='|Dynamic PV \(block volmode\)\] volumes should store data'
    focus+='|Dynamic PV \(ext4\)\] volumes should allow exec of files on the volume'
    focus+='|Dynamic PV \(delayed binding\)\] topology should provision a volume and schedule a pod with AllowedTopologies'
    focus+='|Dynamic PV \(default fs\)\(allowExpansion\)\] volume-expand should resize volume when PVC is edited while pod is using it'
    focus+='|Dynamic Snapshot \(delete policy\)\] snapshottable.*volume snapshot controller should check snapshot fields, check restore correctly works after modifying source data, check deletion \(persistent\)'
    focus+='|Dynamic PV \(default fs\)\] provisioning should provision storage with pvc data source$'
    focus+='|Dynamic PV \(default fs\)\] volume-modify.*should modify volume with no VAC'
    focus+='|Dynamic PV \(default fs\)\] read-write-once-pod should block a second pod from using an in-use ReadWriteOncePod volume on the same node'
    focus+='|Dynamic PV \(filesystem volmode\)\] multiVolume.*should concurrently access the single volume from pods on the same node'
    focus+=')'
    skip=$base_skip
    timeout=40m
    ;;
  multinode)
    # Volumes used from pods on different nodes, one after the other (EBS
    # attaches a filesystem volume to one node at a time), and topology
    # across the two zones, which a single node cannot show.
    focus="$driver_specs.*("
    focus+='multiVolume.*on different node'
    focus+='|topology should fail to schedule a pod which has topologies that conflict with AllowedTopologies'
    focus+='|topology should provision a volume and schedule a pod with AllowedTopologies'
    focus+=')'
    skip=$base_skip
    timeout=40m
    ;;
  *) lc_die "usage: hack/e2e/external.sh [full|ci|multinode]" ;;
esac
focus=${FOCUS:-$focus}
skip=${SKIP:-$skip}
timeout=${TIMEOUT:-$timeout}
procs=${PROCS:-4}

e2e_test=$lc_bin/e2e.test
[[ -x $e2e_test ]] || lc_die "$e2e_test is missing; run hack/local-cluster/build.sh e2e (make e2e-external does)"
lc_pid_alive driver-plugin || [[ -n $(e2e_installed) ]] ||
  lc_die "Diskplane does not run in the local cluster; run hack/e2e/up.sh external first"
# The volume limits spec fills the node's every attachment slot the driver
# reports: a volume attached for something else (the demo's pod) would leave
# its pod unschedulable.
if [[ $profile == full ]]; then
  attached=$(lc_kubectl get volumeattachments -o jsonpath="{.items[?(@.spec.attacher==\"$DRIVER_NAME\")].metadata.name}")
  [[ -z $attached ]] || lc_die "volumes of $DRIVER_NAME are attached ($attached): the volume limits spec needs a node without them; delete their pods first (the demo's: kubectl delete -f examples/dynamic-provisioning/)"
fi

# The Ginkgo CLI runs the suite in parallel processes. It must be the Ginkgo
# release e2e.test was built with, so it comes from the same pinned module.
out=$lc_repo/_output/e2e
ginkgo=$out/bin/ginkgo
mkdir -p "$out/bin"
(source "$lc_here/../lib/goflags.sh" && cd "$lc_here/tools/k8s" && go build -o "$ginkgo" github.com/onsi/ginkgo/v2/ginkgo)

report=$out/external-$profile
rm -rf "$report"
mkdir -p "$report"
lc_log "External Storage ($profile): $procs processes, timeout $timeout; log in $report/ginkgo.log"
start=$SECONDS
# Ginkgo compares its version with the one `go list -m` finds for the
# suite's directory (inside this repository, whose go.mod is not the one
# e2e.test was built from): point that at the pinned tool module.
set +e
GOFLAGS=-modfile=$lc_here/tools/k8s/go.mod "$ginkgo" run --procs="$procs" --timeout="$timeout" --no-color -v --output-dir="$report" --json-report=report.json \
  --focus="$focus" --skip="$skip" "$e2e_test" -- \
  -kubeconfig="$lc_kubeconfig" -storage.testdriver="$lc_repo/tests/e2e/testdriver.yaml" -repo-root="$lc_repo" \
  >"$report/ginkgo.log" 2>&1
rc=$?
set -e
elapsed=$((SECONDS - start))

# Ginkgo reports every spec of e2e.test: those the focus did not select, or
# the skip list removed, are "skipped" without a message; those the suite
# skipped at run time (a capability Diskplane lacks, another OS, a second
# node) carry the reason.
summarize() {
  jq -r --arg skip "$skip" --arg focus "$focus" '
    [.[].SpecReports[] | select(.LeafNodeType == "It") |
      ((.ContainerHierarchyTexts + [.LeafNodeText]) | join(" ")) as $text |
      if .State != "skipped" then .State
      elif (.Failure.Message // "") != "" then "skipped by the suite"
      elif ($text | test($focus)) and ($text | test($skip)) then "skipped by the skip list"
      else "not selected" end] |
    group_by(.) | map("\(.[0]): \(length)") | join(", ")' "$report/report.json"
  jq -r '.[].SpecReports[] | select(.LeafNodeType == "It" and (.State == "failed" or .State == "panicked" or
    .State == "timedout" or .State == "interrupted" or .State == "aborted")) |
    "FAILED: \((.ContainerHierarchyTexts + [.LeafNodeText]) | join(" "))"' "$report/report.json"
}
{
  grep -E '^Ran [0-9]+ of [0-9]+ Specs' "$report/ginkgo.log" | tail -n 1 || true
  [[ ! -f $report/report.json ]] || summarize
  echo "External Storage ($profile) took ${elapsed}s with $procs processes; exit code $rc"
} | tee "$report/summary.txt"
# The suite's reasons for the specs it skipped at run time, with their
# number, then every such spec: for review and for tests/e2e/README.md.
if [[ -f $report/report.json ]]; then
  jq -r '[.[].SpecReports[] | select(.LeafNodeType == "It" and .State == "skipped" and (.Failure.Message // "") != "") |
    {text: ((.ContainerHierarchyTexts + [.LeafNodeText]) | join(" ")), why: (.Failure.Message | split("\n")[0])}] |
    (group_by(.why) | map("\(length)\t\(.[0].why)") | .[]), "", (.[] | "\(.text)\n    \(.why)")' \
    "$report/report.json" >"$report/skipped.txt"
fi
exit "$rc"
