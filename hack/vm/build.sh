#!/usr/bin/env bash
# Builds the node VM's boot files from Debian's packages: Debian's stock
# kernel (linux-image-amd64, extracted to an uncompressed vmlinux so that
# qemu boots it through its PVH entry point without decompressing it under
# software emulation) and an initramfs holding busybox, the kernel modules a
# node needs (device-mapper and dm-crypt, NVMe and the NVMe/TCP target, loop,
# ext4, xfs, 9p, virtio) and the real node tools (util-linux, e2fsprogs,
# xfsprogs, cryptsetup, nvme-cli, udev, coreutils' df) with the libraries
# they load. Output in _output/vm; a second run with nothing changed returns
# at once. Prints the paths of vmlinux and initrd.img.
#   hack/vm/build.sh [--force]
set -euo pipefail
# shellcheck source=hack/vm/lib.sh
source "$(dirname "$0")/lib.sh"

force=false
[[ ${1:-} == --force ]] && force=true

vm_require_packages
mkdir -p "$VM_DIR" "$vm_kernel_dir"

# The kernel package linux-image-amd64 points at today. Debian replaces it
# with each kernel update; the stamp below rebuilds the VM when it moves.
kernel_package() {
  apt-cache depends linux-image-amd64 2>/dev/null | sed -nE 's/^ +Depends: (linux-image-[0-9][^ ]*)$/\1/p' | head -n1
}
kpkg=$(kernel_package)
if [[ -z $kpkg ]]; then
  apt-get update -qq
  kpkg=$(kernel_package)
fi
[[ -n $kpkg ]] || vm_die "apt knows no linux-image-amd64"
kver_pkg=$(apt-cache show "$kpkg" | sed -nE 's/^Version: //p' | head -n1)
kdir=$vm_kernel_dir/${kpkg}_$kver_pkg

tool_versions=$(dpkg-query -W -f='${Package}=${Version}\n' "${vm_packages[@]}" | sort)
stamp=$(printf '%s\n' "$kpkg=$kver_pkg" "$tool_versions" | cat - "$vm_here/build.sh" "$vm_here/init" "$vm_here/lib.sh" | sha256sum | cut -d' ' -f1)
if ! $force && [[ -f $vm_stamp && $(cat "$vm_stamp") == "$stamp" && -f $vm_initrd && -f $vm_vmlinux ]]; then
  printf '%s\n%s\n' "$vm_vmlinux" "$vm_initrd"
  exit 0
fi
started=$SECONDS

if [[ ! -f $kdir/done ]]; then
  vm_log "downloading $kpkg $kver_pkg"
  rm -rf "$kdir" && mkdir -p "$kdir/deb"
  (cd "$kdir/deb" && apt-get download -qq "$kpkg=$kver_pkg" 2>/dev/null) || vm_die "apt-get download $kpkg=$kver_pkg failed"
  dpkg-deb -x "$kdir"/deb/*.deb "$kdir/root"
  rm -rf "$kdir/deb"
  depmod -b "$kdir/root" "$(basename "$(find "$kdir/root/lib/modules" -mindepth 1 -maxdepth 1 -type d | head -n1)")"
  touch "$kdir/done"
fi
kver=$(basename "$(find "$kdir/root/lib/modules" -mindepth 1 -maxdepth 1 -type d | head -n1)")
[[ -n $kver ]] || vm_die "$kpkg holds no modules"
modules=$kdir/root/lib/modules/$kver

# vmlinuz is a bzImage whose payload is xz-compressed: decompress the
# payload from its magic number on.
vm_log "extracting vmlinux of $kver"
offset=$(LC_ALL=C grep -obUaP '\xfd7zXZ\x00' "$kdir/root/boot/vmlinuz-$kver" | head -n1 | cut -d: -f1)
[[ -n $offset ]] || vm_die "no xz payload in vmlinuz-$kver"
tail -c +$((offset + 1)) "$kdir/root/boot/vmlinuz-$kver" | xz -dc 2>/dev/null >"$vm_vmlinux.tmp" || true
file_magic=$(head -c 4 "$vm_vmlinux.tmp" | od -An -tx1 | tr -d ' ')
[[ $file_magic == 7f454c46 ]] || vm_die "the extracted vmlinux of $kver is not an ELF file"
mv "$vm_vmlinux.tmp" "$vm_vmlinux"

vm_log "building the initramfs"
rm -rf "$vm_rootfs"
# Merged /usr, as on Debian 12: udev's rules call /sbin/dmsetup, and the
# tools find their libraries under /lib.
mkdir -p "$vm_rootfs"/{bin,usr/bin,usr/sbin,usr/lib,usr/lib64,etc,proc,sys,dev,run,tmp,host,root,var/tmp}
ln -s usr/sbin "$vm_rootfs/sbin"
ln -s usr/lib "$vm_rootfs/lib"
ln -s usr/lib64 "$vm_rootfs/lib64"
mkdir -p "$vm_rootfs/lib/modules/$kver"

# busybox is the shell and the small tools; its applets live in /bin only,
# so that the real tools below, earlier in PATH, are what programs run.
cp /bin/busybox "$vm_rootfs/bin/busybox"
for applet in $(/bin/busybox --list); do
  [[ -e $vm_rootfs/bin/$applet ]] || ln -s busybox "$vm_rootfs/bin/$applet"
done

# copy_elf copies a program or library to the same path in the rootfs, with
# every library ldd says it loads.
copy_elf() {
  local src=$1 dst=${2:-$1} lib
  mkdir -p "$vm_rootfs$(dirname "$dst")"
  cp -L "$src" "$vm_rootfs$dst"
  while read -r lib; do
    [[ -e $vm_rootfs$lib ]] && continue
    mkdir -p "$vm_rootfs$(dirname "$lib")"
    cp -L "$lib" "$vm_rootfs$lib"
  done < <(ldd "$src" 2>/dev/null | grep -oE '/[^ ]+' | grep -v '^/proc' || true)
}

# The node tools, under their own names in /usr/sbin or /usr/bin.
tools=(mount umount losetup blkid blockdev findmnt lsblk wipefs
  mke2fs mkfs.ext2 mkfs.ext3 mkfs.ext4 resize2fs dumpe2fs e2fsck fsck fsck.ext4 tune2fs
  mkfs.xfs xfs_growfs xfs_io xfs_repair xfs_db xfs_info
  cryptsetup dmsetup df nvme kmod modprobe insmod rmmod lsmod depmod udevadm)
for t in "${tools[@]}"; do
  src=$(command -v "$t") || vm_die "$t is not installed"
  case $(readlink -f "$(dirname "$src")") in
    */sbin) dst=/usr/sbin/$t ;;
    *) dst=/usr/bin/$t ;;
  esac
  if [[ $(head -c 2 "$src") == '#!' ]]; then
    mkdir -p "$vm_rootfs$(dirname "$dst")" && cp -L "$src" "$vm_rootfs$dst" # a shell script (xfs_info)
  else
    copy_elf "$src" "$dst"
  fi
done
copy_elf /lib/systemd/systemd-udevd
for helper in ata_id scsi_id; do copy_elf "/lib/udev/$helper"; done
# cryptsetup's argon2 threads unwind through libgcc_s, which it loads late.
copy_elf "$(readlink -f /lib/x86_64-linux-gnu/libgcc_s.so.1)" /lib/x86_64-linux-gnu/libgcc_s.so.1
mkdir -p "$vm_rootfs/lib/udev/rules.d"
for rules in 50-udev-default 60-block 60-persistent-storage 55-dm 60-persistent-storage-dm 95-dm-notify; do
  cp "/lib/udev/rules.d/$rules.rules" "$vm_rootfs/lib/udev/rules.d/"
done
cp /etc/mke2fs.conf /etc/passwd /etc/group "$vm_rootfs/etc/"
printf 'diskplane-vm\n' >"$vm_rootfs/etc/hostname"

# The modules a node needs, with their dependencies, and all of the crypto
# modules: cryptsetup asks the kernel for ciphers by name, and the kernel
# loads whichever module provides them.
want=(virtio_pci virtio_net virtio_rng 9pnet_virtio 9p loop dm-mod dm-crypt nvme nvme-tcp nvmet nvmet-tcp configfs ext4 xfs algif_skcipher af_alg)
{
  for m in "${want[@]}"; do
    modprobe -d "$kdir/root" -S "$kver" --show-depends "$m" 2>/dev/null || true
  done | awk '$1 == "insmod" {print $2}'
  find "$modules/kernel/crypto" "$modules/kernel/arch/x86/crypto" -name '*.ko*'
} | sort -u | while read -r ko; do
  rel=${ko#"$modules"/}
  mkdir -p "$vm_rootfs/lib/modules/$kver/$(dirname "$rel")"
  cp "$ko" "$vm_rootfs/lib/modules/$kver/$rel"
done
cp "$modules"/modules.builtin "$modules"/modules.builtin.modinfo "$modules"/modules.order "$vm_rootfs/lib/modules/$kver/"
depmod -b "$vm_rootfs" "$kver"
for m in "${want[@]}"; do
  modprobe -d "$vm_rootfs" -S "$kver" --show-depends "$m" >/dev/null 2>&1 || vm_die "module $m is missing from the initramfs"
done

install -m 0755 "$vm_here/init" "$vm_rootfs/init"
(cd "$vm_rootfs" && find . -print0 | cpio --null -o -H newc --quiet) >"$vm_initrd.tmp"
mv "$vm_initrd.tmp" "$vm_initrd"
echo "$stamp" >"$vm_stamp"
vm_log "built $kver: initramfs $(du -h "$vm_initrd" | cut -f1), vmlinux $(du -h "$vm_vmlinux" | cut -f1), in $((SECONDS - started)) s"
printf '%s\n%s\n' "$vm_vmlinux" "$vm_initrd"
