# shellcheck shell=bash disable=SC2034 # the scripts that source this use the names
# Shared by hack/vm's scripts: where the VM's kernel and initramfs are kept,
# and the qemu command line. Source it; it has no side effects.
#
# Everything is built from Debian's packages into _output/vm (git-ignored),
# or VM_DIR:
#   kernel/<version>/   the extracted linux-image package, its vmlinux and modules.dep
#   rootfs/             the initramfs's tree (rebuilt when its stamp changes)
#   initrd.img, vmlinux the VM's boot files
#   stamp               what initrd.img and vmlinux were built from
vm_here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
vm_repo=$(cd "$vm_here/../.." && pwd)
VM_DIR=${VM_DIR:-$vm_repo/_output/vm}
vm_kernel_dir=$VM_DIR/kernel
vm_rootfs=$VM_DIR/rootfs
vm_initrd=$VM_DIR/initrd.img
vm_vmlinux=$VM_DIR/vmlinux
vm_stamp=$VM_DIR/stamp

# The VM's size. Software emulation (there is no KVM here) runs one vCPU as
# fast as two; a GiB and a half holds the tests' sparse images in tmpfs.
VM_MEMORY=${VM_MEMORY:-1536}
VM_CPUS=${VM_CPUS:-1}

# The Debian packages the VM's tools come from (installed on the host, then
# copied into the initramfs with the libraries they load).
vm_packages=(qemu-system-x86 busybox-static kmod util-linux e2fsprogs xfsprogs cryptsetup-bin dmsetup nvme-cli udev coreutils xz-utils cpio)

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
  printf '%s\n' -machine q35 -cpu max -smp "$VM_CPUS" -m "$VM_MEMORY" \
    -nographic -no-reboot -nodefaults -serial stdio \
    -kernel "$vm_vmlinux" -initrd "$vm_initrd" \
    -append "console=ttyS0 panic=-1 loglevel=3 nvme_core.multipath=N $cmdline" \
    -virtfs "local,path=$share,mount_tag=host,security_model=none" \
    -netdev "$netdev" -device virtio-net-pci,netdev=net0,romfile= \
    -device virtio-rng-pci
}
