#!/usr/bin/env bash
# Runs the node-side tests as root inside the node VM, on Debian's stock
# kernel: the packages' test binaries are built here (static, so they run
# as they are), reach the VM through the shared repository, and run there
# with DISKPLANE_REQUIRE_ROOT_TESTS=1 and DISKPLANE_REQUIRE_KERNEL_FEATURES=1,
# so a test that would skip for want of root, device-mapper, the NVMe target
# or a capability fails instead. The packages run VM_TEST_JOBS (2) at a
# time on the VM's two CPUs (software emulation runs each on a host core;
# more at once only slows them down); each one's go test output is printed
# whole, with its time.
# Exits non-zero when any package fails.
# VM_ARCH=arm64 runs them in the arm64 node VM (lib.sh), the binaries built
# for arm64 (GOARCH=arm64; all of them build without cgo).
#   hack/vm/test.sh [PACKAGE...]   default: the node-side packages below
#   VM_TEST_RUN=regexp             passed to -test.run
#   VM_TEST_TIMEOUT=duration       each package's -test.timeout (30m)
#   VM_TEST_ENV="NAME=value ..."   exported to the tests in the VM (paths below the
#                                  repository are seen there under /host)
# tests/crash runs the operations that need the VM's kernel
# (DISKPLANE_CRASH_OPERATIONS=kernel; make test ran the others) unless
# VM_TEST_ENV says otherwise.
set -euo pipefail
# Two CPUs: the packages run two at a time, and tests/crash runs two of its
# operations at a time (software emulation runs each CPU on a host core).
export VM_CPUS=${VM_CPUS:-2}
jobs=${VM_TEST_JOBS:-2}
# shellcheck source=hack/vm/lib.sh
source "$(dirname "$0")/lib.sh"

packages=("$@")
if ((${#packages[@]} == 0)); then
  packages=(./pkg/mounter ./pkg/driver/node ./pkg/emulator/disks ./tests/crash)
fi
[[ $(id -u) -eq 0 ]] || vm_die "the VM tests need root (qemu's shared folder keeps file owners)"

"$vm_here/build.sh" >/dev/null
out=$VM_DIR/tests
rm -rf "$out" && mkdir -p "$out"
started=$SECONDS
script=$out/run.sh
{
  echo '# written by hack/vm/test.sh'
  echo 'export DISKPLANE_REQUIRE_ROOT_TESTS=1 DISKPLANE_REQUIRE_KERNEL_FEATURES=1'
  # tests/crash: the operations that need this kernel (make test ran the
  # others), its table left in _output/crash.
  echo 'export DISKPLANE_CRASH_OPERATIONS=kernel DISKPLANE_CRASH_REPORT=/host/_output/crash'
  [[ -z ${VM_TEST_ENV:-} ]] || echo "export $VM_TEST_ENV"
  [[ -z ${VM_TEST_RUN:-} ]] || printf 'run_flag=-test.run=%q\n' "$VM_TEST_RUN"
  echo "timeout=${VM_TEST_TIMEOUT:-30m}"
  echo "tests=$vm_guest_dir/tests"
  echo 'failed=0'
  # run_package REL NAME: one package's tests, its output kept apart in
  # /tmp/NAME.log; /tmp/NAME.failed when they fail.
  echo 'run_package() {'
  echo '	cd "/host/$1" || return 1'
  echo '	start=$(/bin/busybox cut -d. -f1 /proc/uptime)'
  echo '	if "$tests/$2.test" -test.v -test.count=1 -test.timeout=$timeout $run_flag >"/tmp/$2.log" 2>&1; then'
  echo '		echo "=== VM ok   $1 $(( $(/bin/busybox cut -d. -f1 /proc/uptime) - start )) s" >>"/tmp/$2.log"'
  echo '	else'
  echo '		echo "=== VM FAIL $1 $(( $(/bin/busybox cut -d. -f1 /proc/uptime) - start )) s" >>"/tmp/$2.log"'
  echo '		: >"/tmp/$2.failed"'
  echo '	fi'
  echo '}'
} >"$script"

# flush_batch runs the packages of batch at once and prints their output.
batch=()
flush_batch() {
  ((${#batch[@]} > 0)) || return 0
  local p
  for p in "${batch[@]}"; do echo "run_package ${p%%:*} ${p##*:} &" >>"$script"; done
  echo 'wait' >>"$script"
  for p in "${batch[@]}"; do
    echo "echo '=== VM package ${p%%:*}'; cat /tmp/${p##*:}.log; [ ! -e /tmp/${p##*:}.failed ] || failed=1" >>"$script"
  done
  batch=()
}
for pkg in "${packages[@]}"; do
  rel=${pkg#./}
  name=${rel//\//_}
  vm_log "building $rel's tests"
  (cd "$vm_repo" && CGO_ENABLED=0 GOARCH=$VM_ARCH go test -c -o "$out/$name.test" "./$rel")
  [[ -f $out/$name.test ]] || { vm_log "$rel has no tests"; continue; }
  batch+=("$rel:$name")
  ((${#batch[@]} < jobs)) || flush_batch
done
flush_batch
echo 'exit $failed' >>"$script"
vm_log "built the tests in $((SECONDS - started)) s; booting the VM"
rc=0
"$vm_here/run.sh" "$vm_repo" "${out#"$vm_repo"/}/run.sh" || rc=$?
vm_log "make test-vm ($VM_ARCH): exit status $rc after $((SECONDS - started)) s"
exit "$rc"
