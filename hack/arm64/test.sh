#!/usr/bin/env bash
# make test-arm64: the tests of the plugin's pure packages (every package
# cmd/diskplane links, but pkg/mounter and pkg/driver/node, whose root tests
# need a kernel of their own: make test-vm-arm64) built for linux/arm64 and
# run here under qemu-user, Debian's qemu-user-static. A test that builds and
# starts a program of its own (pkg/version's) builds it for arm64 too, so
# qemu-aarch64 is registered with the kernel's binfmt_misc, as the package
# does itself on a machine that runs systemd: every arm64 program then starts
# under qemu, whoever starts it.
#   hack/arm64/test.sh [go test flag...]   default flags: -count=1 -timeout=20m
#   ARM64_PROFILE=ci hack/arm64/test.sh    only the packages whose own code
#       meets the platform (they import syscall, unsafe, golang.org/x/sys/unix,
#       encoding/binary or runtime): CI's profile; the others are the same Go
#       on either architecture, and the arm64 node VM runs the whole plugin
# Needs root unless binfmt_misc has qemu-aarch64 already.
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
die() {
  printf 'hack/arm64/test.sh: %s\n' "$*" >&2
  exit 1
}

"$repo/hack/install-deps.sh" arm64
binfmt=/proc/sys/fs/binfmt_misc
if [[ ! -e $binfmt/qemu-aarch64 ]]; then
  [[ $(id -u) -eq 0 ]] || die "qemu-aarch64 is not registered with binfmt_misc; run as root, or: sudo /usr/lib/systemd/systemd-binfmt /usr/lib/binfmt.d/qemu-aarch64.conf"
  [[ -e $binfmt/register ]] || mount -t binfmt_misc binfmt_misc "$binfmt"
  # systemd-binfmt registers one file's entries; it needs no running systemd.
  /usr/lib/systemd/systemd-binfmt /usr/lib/binfmt.d/qemu-aarch64.conf
fi
[[ $(head -n1 "$binfmt/qemu-aarch64") == enabled ]] || die "$binfmt/qemu-aarch64 is registered but disabled"

cd "$repo"
module=$(go list -m)
case ${ARM64_PROFILE:-full} in
  full) platform='' ;;
  ci) platform=' (syscall|unsafe|golang\.org/x/sys/unix|encoding/binary|runtime)( |$)' ;;
  *) die "ARM64_PROFILE=$ARM64_PROFILE: want full or ci" ;;
esac
packages=()
while IFS=: read -r p imports; do
  case $p in
    "$module"/pkg/mounter | "$module"/pkg/driver/node) ;;
    "$module"/*) if [[ -z $platform || $imports =~ $platform ]]; then packages+=("$p"); fi ;;
  esac
done < <(GOARCH=arm64 go list -deps -f '{{.ImportPath}}: {{join .Imports " "}}' ./cmd/diskplane)
(($#)) || set -- -count=1 -timeout=20m
echo "arm64 under qemu-user ($(qemu-aarch64-static --version | head -n1)), ${ARM64_PROFILE:-full} profile: ${#packages[@]} packages"
start=$SECONDS
# Without cgo: the plugin is built so (static), and the race detector needs
# cgo and an arm64 C toolchain.
GOARCH=arm64 CGO_ENABLED=0 go test "$@" "${packages[@]}"
echo "arm64 tests passed in $((SECONDS - start))s"
