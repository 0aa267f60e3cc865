#!/usr/bin/env bash
# make bench: measures Diskplane against the physical floor of what it does
# and prints one table (figure, floor, ratio); raw data in
# _output/bench/<time>/. As root (loop devices, mounts, the local cluster).
#   BENCH_PROFILE=full|ci     full (default): P1/P2 at 100 lifecycles ten at a time and 500 a hundred at a
#                             time, 500 with throttling, and 100 with throttling and 5 % 5xx, all on the fixed
#                             2 s latencies; then 100 ten at a time on instant latencies, on EBS-like ones 240
#                             thirty at a time and 60 ten at a time with throttling and 5 % 5xx, and 20 ten at
#                             a time on slow ones; P3 with 50 claims, and a snapshot as soon as a restarted
#                             controller serves; P4 with 50 volumes; P6 over 5,000 volumes. ci: a reduced run (30 lifecycles ten at
#                             a time, plain and with faults; 10 claims) that prints the same kinds of rows.
#   BENCH_LATENCY_PROFILE     the emulator's latency profile for the P1/P2 lifecycle runs that name none:
#                             instant, fixed (default), ebs (times varying as EBS's) or slow; the floors follow
#                             it (docs/emulator.md, "Latency profiles")
#   BENCH_RUNS                a regular expression: only the P1/P2 lifecycle runs whose names match (100x10,
#                             500x100, 500x100-throttled, 100x10-faults, 100x10-instant, 240x30-ebs,
#                             60x10-ebs-faults, 20x10-slow, 40x5-moto; in ci 30x10, 30x10-faults)
#   UPSTREAM_EBS_CSI_DRIVER   a binary of the upstream AWS EBS CSI driver (built by you from
#                             kubernetes-sigs/aws-ebs-csi-driver) to run the lifecycles through too, in the
#                             same run, for a column of its figures: each lifecycle run drives both drivers at
#                             once, each against its own backend with the same draws
#   BENCH_APART=1             every run alone and one driver after the other instead (more than twice as
#                             long; no other run's or driver's work on the machine's cores meanwhile); by
#                             default the runs of ten lifecycles at a time go two at once
# P3 needs the local cluster with Diskplane as host processes: it is brought
# up (hack/e2e/up.sh, with an m7i.48xlarge node so that 50 volumes fit) when
# it does not run, and left running; make demo-down stops it. P5's LUKS2 rows
# need device-mapper: they come from the node VM (hack/vm, built on first use).
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
cd "$repo"
profile=${BENCH_PROFILE:-full}
case $profile in
  full) pods=50 ;;
  ci) pods=10 ;;
  *) echo "BENCH_PROFILE=$profile: want full or ci" >&2; exit 2 ;;
esac
[[ $(id -u) -eq 0 ]] || { echo "make bench needs root (loop devices, mounts, the local cluster)" >&2; exit 1; }
dir=$repo/_output/bench/$(date -u +%Y%m%dT%H%M%SZ)
mkdir -p "$dir"
started=$SECONDS

echo "bench: P3 in the local cluster ($pods claims with pods)"
INSTANCE_TYPE=${INSTANCE_TYPE:-m7i.48xlarge} hack/e2e/up.sh >"$dir/cluster-up.log" 2>&1 ||
  { tail -20 "$dir/cluster-up.log" >&2; exit 1; }
DISKPLANE_BENCH_PODS=$pods DISKPLANE_BENCH_DIR=$dir \
  go test -tags e2e -run '^(TestProvisionToRunning|TestSnapshotAfterControllerRestart)$' -count=1 -timeout 20m -v ./tests/e2e >"$dir/p3.log" 2>&1 ||
  { tail -30 "$dir/p3.log" >&2; exit 1; }

echo "bench: P5 with LUKS2, in the node VM (Debian's kernel: device-mapper)"
# A VM_DIR of its own: make test-vm may run meanwhile (CI).
VM_DIR=$dir/vm VM_MEMORY=${VM_MEMORY:-3072} VM_TEST_RUN='^TestStageEncryptedFigures$' VM_TEST_ENV="DISKPLANE_BENCH_DIR=/host/${dir#"$repo"/}" \
  hack/vm/test.sh ./pkg/driver/node >"$dir/p5-luks.log" 2>&1 || { tail -30 "$dir/p5-luks.log" >&2; exit 1; }

echo "bench: P1, P2, P4, P5, P6"
# -parallel 8: two lanes of runs at once, each run driving both drivers at
# once, are four parallel tests (go test's default allows one per core).
go test -tags bench -run '^TestBench$' -count=1 -timeout 40m -parallel 8 -v ./tests/bench \
  -args -bench.profile="$profile" -bench.out="$dir" -bench.latency="${BENCH_LATENCY_PROFILE:-}" -bench.runs="${BENCH_RUNS:-}" \
  -bench.apart="$([[ ${BENCH_APART:-} == 1 ]] && echo true || echo false)" >"$dir/bench.log" 2>&1 || { tail -40 "$dir/bench.log" >&2; exit 1; }
cat "$dir/table.txt"
echo "bench: $profile profile took $((SECONDS - started)) s; raw data and logs in $dir"
