# shellcheck shell=bash disable=SC2034 # the scripts that source this use the names
# Shared by hack/vm's scripts: where the VM's kernel and initramfs are kept,
# and the qemu command line. Source it; it has no side effects.
#
# The boot files are built from Debian's packages into this machine's cache
# (hack/lib/cache.sh: vm-amd64/ or vm-arm64/ below it; VM_BUILD_DIR overrides),
# shared by its checkouts:
#   kernel/<version>/   the extracted linux-image package, its vmlinux and modules.dep
#   rootfs/             the initramfs's tree (rebuilt when its stamp changes)
#   initrd.img, vmlinux the VM's boot files (Image instead of vmlinux on arm64)
#   stamp               what initrd.img and vmlinux were built from
# What a run writes (test binaries, logs) goes to _output/vm (git-ignored),
# or VM_DIR, below the repository, which the VM sees.
#
# VM_ARCH picks the node's architecture. amd64 (the default) boots Debian's
# amd64 kernel under qemu-system-x86_64 with the host's own tools. arm64 (a
# Graviton node) boots Debian's arm64 kernel under qemu-system-aarch64 from
# vm-arm64/, its tools unpacked from arm64 packages (apt/ there holds the
# private apt state they are resolved and downloaded with), since the host
# can run none of them.
vm_here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
vm_repo=$(cd "$vm_here/../.." && pwd)
# shellcheck source=hack/lib/cache.sh
source "$vm_here/../lib/cache.sh"
VM_ARCH=${VM_ARCH:-amd64}
case $VM_ARCH in
  amd64) VM_DIR=${VM_DIR:-$vm_repo/_output/vm} vm_vmlinux_name=vmlinux ;;
  arm64) VM_DIR=${VM_DIR:-$vm_repo/_output/vm-arm64} vm_vmlinux_name=Image ;;
  *) printf 'vm: error: VM_ARCH must be amd64 or arm64, not %s\n' "$VM_ARCH" >&2 && exit 1 ;;
esac
vm_build_dir=${VM_BUILD_DIR:-$diskplane_cache_dir/vm-$VM_ARCH}
vm_kernel_dir=$vm_build_dir/kernel
vm_rootfs=$vm_build_dir/rootfs
vm_initrd=$vm_build_dir/initrd.img
vm_vmlinux=$vm_build_dir/$vm_vmlinux_name
vm_stamp=$vm_build_dir/stamp
# VM_DIR as the VM sees it, when it lies below the repository (the share
# test.sh and nvme.sh give the VM): where their scripts find what they built.
vm_guest_dir=/host/${VM_DIR#"$vm_repo"/}

# The VM's size. Software emulation (there is no KVM here) runs one vCPU as
# fast as two; a GiB and a half holds the tests' sparse images in tmpfs.
VM_MEMORY=${VM_MEMORY:-1536}
VM_CPUS=${VM_CPUS:-1}

# The Debian packages the VM's tools come from (installed on the host, then
# copied into the initramfs with the libraries they load). On arm64 the host
# needs only qemu and the build's own tools: kmod's depmod (it reads modules
# of any architecture), binutils' readelf (the libraries an arm64 program
# loads, which ldd cannot tell on this host), cpio, and busybox-static, whose
# applet list is the arm64 busybox's (the same Debian build of another
# architecture). The node's tools themselves are vm_arm64_packages, unpacked
# from arm64 packages, never installed.
case $VM_ARCH in
  amd64) vm_packages=(qemu-system-x86 busybox-static kmod util-linux e2fsprogs xfsprogs cryptsetup-bin dmsetup nvme-cli udev coreutils xz-utils cpio) ;;
  arm64) vm_packages=(qemu-system-arm busybox-static kmod binutils cpio debian-archive-keyring) ;;
esac
vm_arm64_packages=(busybox-static kmod util-linux mount e2fsprogs xfsprogs cryptsetup-bin dmsetup nvme-cli udev coreutils libgcc-s1)
# The arm64 VM's CPU: Neoverse N1, Graviton2's core. qemu's "max" turns on
# pointer authentication, whose emulated QARMA algorithm made a boot 3.5
# times slower here; N1 and Cortex-A72 have none and boot as fast.
VM_ARM64_CPU=${VM_ARM64_CPU:-neoverse-n1}

vm_log() { printf '%s vm: %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
vm_die() { printf 'vm: error: %s\n' "$*" >&2; exit 1; }

# vm_require_packages installs the packages the VM needs when they are
# missing (as root), or names them.
vm_require_packages() {
  local missing=() p
  for p in "${vm_packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  ((${#missing[@]} == 0)) && return 0
  [[ $(id -u) -eq 0 ]] || vm_die "missing Debian packages ${missing[*]}; run: sudo apt-get install -y ${missing[*]}"
  vm_log "installing ${missing[*]}"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null ||
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null; }
}

# vm_qemu_args prints, one per line, the qemu arguments that boot the VM with
# SHARE_DIR shared at /host, the console on stdio and the given kernel
# command-line additions. User-mode networking gives the guest the host's
# loopback at 10.0.2.2; FORWARDS (host:guest port pairs, space-separated)
# reach guest ports from the host's loopback.
vm_qemu_args() {
  local share=$1 cmdline=$2 forwards=${3:-} netdev="user,id=net0,ipv6=off" f
  for f in $forwards; do
    netdev+=",hostfwd=tcp:127.0.0.1:${f%%:*}-:${f##*:}"
  done
  # The same devices on both: arm64's virt board has PCIe, so virtio-pci
  # serves there too; only the board, the CPU and the console's UART differ.
  local machine=q35 cpu=max console=ttyS0
  if [[ $VM_ARCH == arm64 ]]; then
    machine=virt cpu=$VM_ARM64_CPU console=ttyAMA0
  fi
  printf '%s\n' -machine "$machine" -cpu "$cpu" -smp "$VM_CPUS" -m "$VM_MEMORY" \
    -nographic -no-reboot -nodefaults -serial stdio \
    -kernel "$vm_vmlinux" -initrd "$vm_initrd" \
    -append "console=$console panic=-1 loglevel=3 nvme_core.multipath=N $cmdline" \
    -virtfs "local,path=$share,mount_tag=host,security_model=none" \
    -netdev "$netdev" -device virtio-net-pci,netdev=net0,romfile= \
    -device virtio-rng-pci
}

# vm_qemu prints the qemu program that runs VM_ARCH's VM.
vm_qemu() {
  case $VM_ARCH in
    amd64) echo qemu-system-x86_64 ;;
    arm64) echo qemu-system-aarch64 ;;
  esac
}
