#!/usr/bin/env bash
# Boots the node VM (hack/vm/build.sh builds it first when needed), shares
# SHARE_DIR with it at /host, runs SCRIPT (a path below SHARE_DIR) there as
# root, prints the VM's console, and exits with the script's exit status. A VM
# that dies or hangs past VM_TIMEOUT seconds (default 1800) is an error.
# VM_ARCH=arm64 boots the arm64 node (qemu-system-aarch64, lib.sh).
#   [VM_ARCH=arm64] hack/vm/run.sh [--forward HOSTPORT:GUESTPORT]... SHARE_DIR SCRIPT
set -euo pipefail
# shellcheck source=hack/vm/lib.sh
source "$(dirname "$0")/lib.sh"

forwards=""
while [[ ${1:-} == --forward ]]; do
  forwards+=" $2"
  shift 2
done
(($# == 2)) || vm_die "usage: hack/vm/run.sh [--forward HOSTPORT:GUESTPORT]... SHARE_DIR SCRIPT"
share=$(cd "$1" && pwd)
script=$2
[[ -f $share/$script ]] || vm_die "$share/$script does not exist"
[[ $script != /* && $script != *..* ]] || vm_die "SCRIPT must be a path below SHARE_DIR"

"$vm_here/build.sh" >/dev/null
status_file=$share/$script.status
rm -f "$status_file"
mapfile -t args < <(vm_qemu_args "$share" "diskplane.run=$script" "$forwards")
started=$SECONDS
rc=0
timeout --foreground "${VM_TIMEOUT:-1800}" "$(vm_qemu)" "${args[@]}" </dev/null || rc=$?
if ((rc == 124)); then
  vm_die "the VM ran longer than ${VM_TIMEOUT:-1800} s and was stopped"
fi
[[ -f $status_file ]] || vm_die "the VM stopped (qemu exit status $rc) before $script finished"
status=$(cat "$status_file")
vm_log "$script exited with $status after $((SECONDS - started)) s in the VM"
exit "$status"
