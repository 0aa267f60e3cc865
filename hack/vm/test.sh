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
#   VM_KERNEL_ONLY=1               only what this machine's kernel cannot prove (make
#                                  test-vm VM_PROFILE=ci): each package runs here first,
#                                  as root, and records the tests it skips for want of a
#                                  kernel feature (testutil.RequireKernelFeature); only
#                                  those run in the VM, and a package with none does not
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
  echo "timeout=${VM_TEST_TIMEOUT:-30m}"
  echo "tests=$vm_guest_dir/tests"
  echo 'failed=0'
  # run_package REL NAME [RUN]: one package's tests (those RUN matches),
  # its output kept apart in /tmp/NAME.log; /tmp/NAME.failed when they fail.
  echo 'run_package() {'
  echo '	cd "/host/$1" || return 1'
  echo '	start=$(/bin/busybox cut -d. -f1 /proc/uptime)'
  echo '	if "$tests/$2.test" -test.v -test.count=1 -test.timeout=$timeout ${3:+"-test.run=$3"} >"/tmp/$2.log" 2>&1; then'
  echo '		echo "=== VM ok   $1 $(( $(/bin/busybox cut -d. -f1 /proc/uptime) - start )) s" >>"/tmp/$2.log"'
  echo '	else'
  echo '		echo "=== VM FAIL $1 $(( $(/bin/busybox cut -d. -f1 /proc/uptime) - start )) s" >>"/tmp/$2.log"'
  echo '		: >"/tmp/$2.failed"'
  echo '	fi'
  echo '}'
} >"$script"

# flush_batch runs the packages of batch (REL:NAME:RUN) at once and prints
# their output.
batch=()
flush_batch() {
  ((${#batch[@]} > 0)) || return 0
  local p rel name run
  for p in "${batch[@]}"; do
    IFS=: read -r rel name run <<<"$p"
    printf 'run_package %q %q %q &\n' "$rel" "$name" "$run" >>"$script"
  done
  echo 'wait' >>"$script"
  for p in "${batch[@]}"; do
    IFS=: read -r rel name run <<<"$p"
    echo "echo '=== VM package $rel'; cat /tmp/$name.log; [ ! -e /tmp/$name.failed ] || failed=1" >>"$script"
  done
  batch=()
}

# kernel_tests REL NAME runs REL's tests here (the binary $out/host/NAME.test)
# and prints a -test.run expression of those that skipped for want of a
# kernel feature; nothing when there were none. Their own time and output go
# to $out/NAME.host.log. A failure here ends the run: the list would not
# tell what the VM must prove.
kernel_tests() {
  local rel=$1 name=$2 skips=$out/$2.skips start=$SECONDS
  local -a names
  rm -f "$skips"
  if ! (cd "$vm_repo/$rel" && env -u "DISKPLANE_REQUIRE_KERNEL_FEATURES" -u DISKPLANE_CRASH_REPORT \
    DISKPLANE_KERNEL_SKIPS_FILE="$skips" "$out/host/$name.test" -test.count=1 -test.timeout=15m \
    ${VM_TEST_RUN:+"-test.run=$VM_TEST_RUN"} >"$out/$name.host.log" 2>&1); then
    tail -n 30 "$out/$name.host.log" >&2
    vm_die "$rel's tests failed on this machine (log: $out/$name.host.log); which of them need the VM is unknown"
  fi
  mapfile -t names < <(sort -u "$skips" 2>/dev/null)
  vm_log "$rel on this machine: $((SECONDS - start)) s, ${#names[@]} test(s) left for the VM's kernel${names[*]:+: ${names[*]}}"
  ((${#names[@]} == 0)) || (IFS='|' && echo "^(${names[*]})\$")
}

kernel_only=${VM_KERNEL_ONLY:-}
for pkg in "${packages[@]}"; do
  rel=${pkg#./}
  name=${rel//\//_}
  vm_log "building $rel's tests"
  (cd "$vm_repo" && CGO_ENABLED=0 GOARCH=$VM_ARCH go test -c -o "$out/$name.test" "./$rel")
  [[ -f $out/$name.test ]] || { vm_log "$rel has no tests"; continue; }
  run=${VM_TEST_RUN:-}
  if [[ $kernel_only == 1 ]]; then
    mkdir -p "$out/host"
    if [[ $VM_ARCH == "$(go env GOHOSTARCH)" ]]; then
      ln -f "$out/$name.test" "$out/host/$name.test"
    else
      (cd "$vm_repo" && CGO_ENABLED=0 go test -c -o "$out/host/$name.test" "./$rel")
    fi
    run=$(kernel_tests "$rel" "$name") || exit 1
    [[ -n $run ]] || { vm_log "$rel: this machine's kernel proved all of it; not run in the VM"; continue; }
  fi
  batch+=("$rel:$name:$run")
  ((${#batch[@]} < jobs)) || flush_batch
done
flush_batch
echo 'exit $failed' >>"$script"
vm_log "built the tests in $((SECONDS - started)) s; booting the VM"
rc=0
"$vm_here/run.sh" "$vm_repo" "${out#"$vm_repo"/}/run.sh" || rc=$?
vm_log "make test-vm ($VM_ARCH): exit status $rc after $((SECONDS - started)) s"
exit "$rc"
