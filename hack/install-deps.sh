#!/usr/bin/env bash
# Installs the Debian packages Diskplane's build, tests and demo use, when they
# are missing. Safe to run again; retries apt once because a transient dpkg
# error has been seen on fresh machines.
#   hack/install-deps.sh            packages for build and tests
#   hack/install-deps.sh cluster    plus what the local Kubernetes cluster needs
#   hack/install-deps.sh windows    plus Wine and mingw-w64, for the Windows node's tests (hack/wine)
#   hack/install-deps.sh arm64      plus qemu-user-static: arm64 programs run under qemu-user (make test-arm64,
#                                   the arm64 image's programs started by make image's checks)
#   hack/install-deps.sh vm         plus qemu-system-x86_64 and the node's tools the amd64 node VM copies
#                                   (hack/vm/build.sh installs them itself when missing)
#   hack/install-deps.sh vm-arm64   plus qemu-system-aarch64 and what hack/vm/build.sh needs to assemble
#                                   the arm64 node VM from arm64 packages (make test-vm-arm64)
#   hack/install-deps.sh PROFILE... several of them in one apt run (CI installs every lane's at once)
set -euo pipefail

# gcc and libc6-dev: make test's `go test -race` (the race detector needs
# cgo), and the local cluster's static pause binary.
# buildah: the image scripts, and the test that pushes an image to a registry.
# libhivex-bin: hivexml, an independent reader of the registry hives the
# Windows image carries (hack/image/winimage).
# vm_packages ARCH prints the Debian packages the node VM of ARCH needs.
vm_packages() {
  (
    VM_ARCH=$1
    # shellcheck source=hack/vm/lib.sh
    source "$(dirname "$0")/vm/lib.sh"
    printf '%s\n' "${vm_packages[@]}"
  )
}

packages=(e2fsprogs xfsprogs util-linux mount cryptsetup-bin kmod ca-certificates curl jq gcc libc6-dev buildah libhivex-bin)
for profile in "$@"; do
  case $profile in
  cluster) packages+=(containerd runc containernetworking-plugins iptables nftables conntrack etcd-server busybox-static openssl) ;;
  windows) packages+=(wine wine64 gcc-mingw-w64-x86-64-win32) ;;
  arm64) packages+=(qemu-user-static) ;;
  # The node VM's packages, as hack/vm/lib.sh lists them for each architecture.
  vm) mapfile -t -O "${#packages[@]}" packages < <(vm_packages amd64) ;;
  vm-arm64) mapfile -t -O "${#packages[@]}" packages < <(vm_packages arm64) ;;
  *) echo "hack/install-deps.sh: unknown profile $profile (want cluster, windows, arm64, vm or vm-arm64)" >&2 && exit 2 ;;
  esac
done

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]} == 0)); then
  exit 0
fi
if [[ $(id -u) -ne 0 ]]; then
  echo "hack/install-deps.sh: missing Debian packages: ${missing[*]}" >&2
  echo "hack/install-deps.sh: not root, so not installing them; run: sudo apt-get install -y ${missing[*]}" >&2
  exit 0
fi
echo "Installing Debian packages: ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
install() {
  apt-get update -qq && apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}
install || { echo "apt failed once; retrying in 5s" >&2; sleep 5; install; }
