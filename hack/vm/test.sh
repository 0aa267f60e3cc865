#!/usr/bin/env bash
# Runs the node-side tests as root inside the node VM, on Debian's stock
# kernel: the packages' test binaries are built here (static, so they run
# as they are), reach the VM through the shared repository, and run there
# with DISKPLANE_REQUIRE_ROOT_TESTS=1 and DISKPLANE_REQUIRE_KERNEL_FEATURES=1,
# so a test that would skip for want of root, device-mapper, the NVMe target
# or a capability fails instead. Prints each package's go test output and
# time; exits non-zero when any package fails.
#   hack/vm/test.sh [PACKAGE...]   default: the node-side packages below
#   VM_TEST_RUN=regexp             passed to -test.run
#   VM_TEST_ENV="NAME=value ..."   exported to the tests in the VM (paths below the
#                                  repository are seen there under /host)
set -euo pipefail
# shellcheck source=hack/vm/lib.sh
source "$(dirname "$0")/lib.sh"

packages=("$@")
if ((${#packages[@]} == 0)); then
  packages=(./pkg/mounter ./pkg/driver/node ./pkg/emulator/disks)
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
  [[ -z ${VM_TEST_ENV:-} ]] || echo "export $VM_TEST_ENV"
  echo 'failed=0'
}>"$script"
for pkg in "${packages[@]}"; do
  rel=${pkg#./}
  name=${rel//\//_}
  vm_log "building $rel's tests"
  (cd "$vm_repo" && CGO_ENABLED=0 go test -c -o "$out/$name.test" "./$rel")
  [[ -f $out/$name.test ]] || { vm_log "$rel has no tests"; continue; }
  cat >>"$script" <<EOF
echo "=== VM package $rel"
cd "/host/$rel" || exit 1
start=\$(/bin/busybox cut -d. -f1 /proc/uptime)
if "/host/_output/vm/tests/$name.test" -test.v -test.count=1 -test.timeout=30m ${VM_TEST_RUN:+-test.run '$VM_TEST_RUN'}; then
  echo "=== VM ok   $rel \$(( \$(/bin/busybox cut -d. -f1 /proc/uptime) - start )) s"
else
  echo "=== VM FAIL $rel \$(( \$(/bin/busybox cut -d. -f1 /proc/uptime) - start )) s"
  failed=1
fi
EOF
done
echo 'exit $failed' >>"$script"
vm_log "built the tests in $((SECONDS - started)) s; booting the VM"
rc=0
"$vm_here/run.sh" "$vm_repo" "_output/vm/tests/run.sh" || rc=$?
vm_log "make test-vm: exit status $rc after $((SECONDS - started)) s"
exit "$rc"
