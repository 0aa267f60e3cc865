#!/usr/bin/env bash
# Builds the node VM's boot files from Debian's packages: Debian's stock
# kernel (linux-image-amd64, extracted to an uncompressed vmlinux so that
# qemu boots it through its PVH entry point without decompressing it under
# software emulation) and an initramfs holding busybox, the kernel modules a
# node needs (device-mapper and dm-crypt, NVMe and the NVMe/TCP target, loop,
# ext4, xfs, 9p, virtio) and the real node tools (util-linux, e2fsprogs,
# xfsprogs, cryptsetup, nvme-cli, udev, coreutils' df) with the libraries
# they load. Output in this machine's cache (lib.sh); a second run with
# nothing changed returns at once. Prints the paths of vmlinux and initrd.img.
#
# VM_ARCH=arm64 builds the arm64 node instead, into vm-arm64/, from
# Debian's arm64 packages resolved and downloaded with a private apt state
# (this machine's apt configuration is not touched): linux-image-arm64,
# whose Image qemu boots as it is, and the same tools,
# unpacked with dpkg-deb -x; the libraries they load are read from their
# ELF headers (readelf: the host's ldd cannot run an arm64 loader) and
# found among the unpacked packages. Prints the paths of Image and
# initrd.img. DEBIAN_MIRROR and DEBIAN_SECURITY_MIRROR override the mirror
# this machine's own apt sources name.
#   [VM_ARCH=arm64] hack/vm/build.sh [--force]
set -euo pipefail
# shellcheck source=hack/vm/lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=hack/lib/debian.sh
source "$(dirname "$0")/../lib/debian.sh"

force=false
[[ ${1:-} == --force ]] && force=true

vm_require_packages
mkdir -p "$vm_kernel_dir"
# One build at a time (the suites that boot the VM may start together).
exec {build_lock}>"$vm_build_dir/.lock"
flock "$build_lock"

# The arm64 packages come from the mirror the machine's own packages come
# from, through a private apt in $vm_build_dir/apt (see debian_arm64_apt).
arm64_apt() {
  local mirror security
  mirror=${DEBIAN_MIRROR:-$(debian_apt_source bookworm)}
  [[ -n $mirror ]] || vm_die "this machine's apt sources name no Debian bookworm mirror; set DEBIAN_MIRROR (http://MIRROR/debian)"
  security=${DEBIAN_SECURITY_MIRROR:-$(debian_apt_source bookworm-security)}
  debian_arm64_apt "$vm_build_dir/apt" "$mirror" "$security"
}
[[ $VM_ARCH == amd64 ]] || arm64_apt

# The kernel package linux-image-$VM_ARCH points at today. Debian replaces it
# with each kernel update; the stamp below rebuilds the VM when it moves.
# Nothing when apt knows no such package yet (its lists not downloaded).
kernel_package() {
  { apt-cache depends "linux-image-$VM_ARCH" 2>/dev/null || true; } | sed -nE 's/^ +Depends: (linux-image-[0-9][^ ]*)$/\1/p' | head -n1
}
kpkg=$(kernel_package)
if [[ -z $kpkg ]]; then
  apt-get update -qq
  kpkg=$(kernel_package)
fi
[[ -n $kpkg ]] || vm_die "apt knows no linux-image-$VM_ARCH"
kver_pkg=$(apt-cache show "$kpkg" | sed -nE 's/^Version: //p' | head -n1)
kdir=$vm_kernel_dir/${kpkg}_$kver_pkg

if [[ $VM_ARCH == amd64 ]]; then
  tool_versions=$(dpkg-query -W -f='${Package}=${Version}\n' "${vm_packages[@]}" | sort)
else
  # Every arm64 package the tools need, as apt would install them on an
  # empty system, "name version" a line; and the host's packages the build
  # runs (busybox's applet list among them).
  debs=$(apt-get install -s -qq "${vm_arm64_packages[@]}" | awk '$1 == "Inst" { gsub(/[()]/, "", $3); print $2, $3 }' | sort)
  [[ -n $debs ]] || vm_die "apt resolved no arm64 packages for ${vm_arm64_packages[*]}"
  tool_versions=$(printf '%s\n' "$debs"; dpkg-query -W -f='${Package}=${Version}\n' "${vm_packages[@]}" | sort)
fi
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

if [[ $VM_ARCH == amd64 ]]; then
  # vmlinuz is a bzImage whose payload is xz-compressed: decompress the
  # payload from its magic number on.
  vm_log "extracting vmlinux of $kver"
  offset=$(LC_ALL=C grep -obUaP '\xfd7zXZ\x00' "$kdir/root/boot/vmlinuz-$kver" | head -n1 | cut -d: -f1)
  [[ -n $offset ]] || vm_die "no xz payload in vmlinuz-$kver"
  tail -c +$((offset + 1)) "$kdir/root/boot/vmlinuz-$kver" | xz -dc 2>/dev/null >"$vm_vmlinux.tmp" || true
  file_magic=$(head -c 4 "$vm_vmlinux.tmp" | od -An -tx1 | tr -d ' ')
  [[ $file_magic == 7f454c46 ]] || vm_die "the extracted vmlinux of $kver is not an ELF file"
  mv "$vm_vmlinux.tmp" "$vm_vmlinux"
else
  # arm64's vmlinuz is the kernel's Image, which qemu's -kernel boots on
  # the virt board as it is: Debian's bookworm ships it uncompressed (it
  # may ship it gzip-compressed, which is decompressed here once rather
  # than by qemu at every boot). Checked by the arm64 Image header's magic
  # "ARM\x64" at offset 56.
  vm_log "copying the Image of $kver"
  if gzip -t "$kdir/root/boot/vmlinuz-$kver" 2>/dev/null; then
    gzip -dc "$kdir/root/boot/vmlinuz-$kver" >"$vm_vmlinux.tmp"
  else
    cp "$kdir/root/boot/vmlinuz-$kver" "$vm_vmlinux.tmp"
  fi
  file_magic=$(od -An -tx1 -j56 -N4 "$vm_vmlinux.tmp" | tr -d ' ')
  [[ $file_magic == 41524d64 ]] || vm_die "vmlinuz-$kver holds no arm64 Image"
  mv "$vm_vmlinux.tmp" "$vm_vmlinux"
fi

# arm64: the tools' packages, downloaded into the private apt's cache and
# unpacked into one tree ($vm_build_dir/debs) that the initramfs takes its files
# from. Merged /usr as the installed system has it, and absolute symlinks
# (kmod's /sbin/modprobe -> /bin/kmod) pointed into the tree, so that
# following a link never reaches this machine's amd64 files.
root=
if [[ $VM_ARCH == arm64 ]]; then
  root=$vm_build_dir/debs
  vm_log "unpacking $(wc -l <<<"$debs") arm64 packages"
  apt-get install -d -y -qq "${vm_arm64_packages[@]}" >/dev/null || vm_die "apt could not download the arm64 packages"
  rm -rf "$root" && mkdir -p "$root"
  keep=()
  while read -r name version; do
    deb=$(debian_cached_deb "$vm_build_dir/apt/cache/archives" "$name" "$version" | tail -n1)
    [[ -n $deb ]] || vm_die "apt downloaded no package file for $name $version"
    dpkg-deb -x "$deb" "$root"
    keep+=("$deb")
  done <<<"$debs"
  debian_prune_cache "$vm_build_dir/apt/cache/archives" "${keep[@]}"
  debian_merge_usr "$root"
  find "$root" -type l -lname '/*' | while read -r link; do
    ln -sfn "$root$(readlink "$link")" "$link"
  done
fi

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
# so that the real tools below, earlier in PATH, are what programs run. The
# applets are named by the host's busybox-static: the arm64 one cannot run
# here, and Debian builds both from one configuration.
cp "$root/bin/busybox" "$vm_rootfs/bin/busybox"
for applet in $(/bin/busybox --list); do
  [[ -e $vm_rootfs/bin/$applet ]] || ln -s busybox "$vm_rootfs/bin/$applet"
done

if [[ $VM_ARCH == amd64 ]]; then
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
else
  # elf_needs prints the paths (in the unpacked tree) of what the arm64 ELF
  # file FILE loads directly: its program interpreter and its DT_NEEDED
  # libraries, searched in its DT_RUNPATH (systemd's private library) and
  # the multiarch directories, as the dynamic loader would; "!NAME" for a
  # library found nowhere.
  elf_needs() {
    local dump needed dir found
    dump=$(readelf -dlW "$1" 2>/dev/null) || return 0
    sed -nE 's/.*Requesting program interpreter: ([^]]+)\]/\1/p' <<<"$dump"
    local -a dirs
    read -ra dirs <<<"$(sed -nE 's/.*\((RUNPATH|RPATH)\).*\[(.*)\]/\2/p' <<<"$dump" | tr ':' ' ')"
    dirs+=(/usr/lib/aarch64-linux-gnu /usr/lib)
    while read -r needed; do
      found=
      for dir in "${dirs[@]}"; do
        if [[ -e $root$dir/$needed ]]; then found=$dir/$needed && break; fi
      done
      echo "${found:-!$needed}"
    done < <(sed -nE 's/.*\(NEEDED\).*\[(.*)\]/\1/p' <<<"$dump")
  }
  # copy_elf copies a program or library of the unpacked tree (SRC, below
  # $root) to DST in the rootfs (its path in the tree by default), with every
  # library it loads, recursively.
  copy_elf() {
    local src=$1 dst=${2:-${1#"$root"}} lib
    mkdir -p "$vm_rootfs$(dirname "$dst")"
    cp -L "$src" "$vm_rootfs$dst"
    for lib in $(elf_needs "$src"); do
      [[ $lib != '!'* ]] || vm_die "${src#"$root"} loads ${lib#!}, which no unpacked package holds"
      [[ -e $vm_rootfs$lib ]] || copy_elf "$root$lib"
    done
  }
fi

# tool_path prints where tool T is: on this machine's PATH for amd64, in the
# unpacked tree's /usr/sbin or /usr/bin for arm64.
tool_path() {
  if [[ $VM_ARCH == amd64 ]]; then
    command -v "$1"
    return
  fi
  local d
  for d in usr/sbin usr/bin; do
    [[ -e $root/$d/$1 ]] && echo "$root/$d/$1" && return 0
  done
  return 1
}

# The node tools, under their own names in /usr/sbin or /usr/bin.
tools=(mount umount losetup blkid blockdev findmnt lsblk wipefs
  mke2fs mkfs.ext2 mkfs.ext3 mkfs.ext4 resize2fs dumpe2fs e2fsck fsck fsck.ext4 tune2fs
  mkfs.xfs xfs_growfs xfs_io xfs_repair xfs_db xfs_info
  cryptsetup dmsetup df nvme kmod modprobe insmod rmmod lsmod depmod udevadm)
for t in "${tools[@]}"; do
  src=$(tool_path "$t") || vm_die "$t is not installed"
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
copy_elf "$root/lib/systemd/systemd-udevd" /lib/systemd/systemd-udevd
for helper in ata_id scsi_id; do copy_elf "$root/lib/udev/$helper" "/lib/udev/$helper"; done
# cryptsetup's argon2 threads unwind through libgcc_s, which it loads late.
triplet=x86_64-linux-gnu
[[ $VM_ARCH == amd64 ]] || triplet=aarch64-linux-gnu
copy_elf "$(readlink -f "$root/lib/$triplet/libgcc_s.so.1")" "/lib/$triplet/libgcc_s.so.1"
mkdir -p "$vm_rootfs/lib/udev/rules.d"
for rules in 50-udev-default 60-block 60-persistent-storage 55-dm 60-persistent-storage-dm 95-dm-notify; do
  cp "$root/lib/udev/rules.d/$rules.rules" "$vm_rootfs/lib/udev/rules.d/"
done
# Users and groups are text, the same on both architectures.
cp "$root/etc/mke2fs.conf" /etc/passwd /etc/group "$vm_rootfs/etc/"
printf 'diskplane-vm\n' >"$vm_rootfs/etc/hostname"

# The modules a node needs, with their dependencies, and all of the crypto
# modules: cryptsetup asks the kernel for ciphers by name, and the kernel
# loads whichever module provides them.
want=(virtio_pci virtio_net virtio_rng 9pnet_virtio 9p loop dm-mod dm-crypt nvme nvme-tcp nvmet nvmet-tcp configfs ext4 xfs algif_skcipher af_alg)
{
  for m in "${want[@]}"; do
    modprobe -d "$kdir/root" -S "$kver" --show-depends "$m" 2>/dev/null || true
  done | awk '$1 == "insmod" {print $2}'
  karch=x86
  [[ $VM_ARCH == amd64 ]] || karch=arm64
  find "$modules/kernel/crypto" "$modules/kernel/arch/$karch/crypto" -name '*.ko*'
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
# The unpacked arm64 packages (250 MB) are made again from apt's cache when
# the stamp next changes.
[[ -z $root ]] || rm -rf "$root"
vm_log "built $kver: initramfs $(du -h "$vm_initrd" | cut -f1), $vm_vmlinux_name $(du -h "$vm_vmlinux" | cut -f1), in $((SECONDS - started)) s"
printf '%s\n%s\n' "$vm_vmlinux" "$vm_initrd"
