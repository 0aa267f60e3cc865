#!/usr/bin/env bash
# Assembles the root filesystem of the linux/arm64 image without running
# anything built for arm64 (no qemu-user, no binfmt): the Dockerfile's
# runtime stage RUNs apt-get inside its base, which only works on the base's
# own architecture, so for arm64 the same packages are resolved and unpacked
# from this machine instead.
#   hack/image/rootfs-arm64.sh DIR PACKAGES
# DIR (created, must not exist) receives the root filesystem; PACKAGES the
# packages unpacked, "name version" a line: the versions the mirror served
# now, which the image then pins.
#
# What goes in: the Dockerfile's packages (e2fsprogs xfsprogs util-linux mount
# cryptsetup-bin ca-certificates) and what they depend on, as apt resolves
# them for arm64 in a private apt state (this machine's apt is not touched),
# with base-files and base-passwd, the part of debian:bookworm-slim that gives
# a root filesystem its identity and users; minus what the Dockerfile purges.
# Each package is unpacked with dpkg-deb -x, then /bin, /sbin and /lib are
# merged into /usr as in bookworm's images. What the maintainer scripts that
# matter would do is done here: /etc/passwd and /etc/group from base-passwd's
# masters, and the CA bundle, which update-ca-certificates (this machine's,
# the bundle is text) writes from the arm64 package's certificates. dpkg's
# status lists the packages, as in the amd64 image, for scanners that read it.
#
# Environment: DEBIAN_MIRROR, DEBIAN_SECURITY_MIRROR as for bases.sh.
set -euo pipefail
# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh"
[[ $# -eq 2 ]] || img_die "usage: $0 DIR PACKAGES"
dest=$1 list=$2
[[ ! -e $dest ]] || img_die "$dest exists"
[[ $(id -u) -eq 0 ]] || img_die "rootfs-arm64.sh needs root (dpkg-deb -x keeps the packages' owners)"

DEBIAN_MIRROR=${DEBIAN_MIRROR:-$(debian_apt_source bookworm)}
DEBIAN_MIRROR=${DEBIAN_MIRROR:-$(debian_apt_archive)}
[[ -n $DEBIAN_MIRROR ]] ||
  img_die "this machine's apt sources name no Debian mirror; set DEBIAN_MIRROR to a Debian mirror (http://MIRROR/debian)"
DEBIAN_SECURITY_MIRROR=${DEBIAN_SECURITY_MIRROR:-$(debian_apt_source bookworm-security)}
keyring=/usr/share/keyrings/debian-archive-keyring.gpg
# What this machine needs: Debian's archive keys, and update-ca-certificates.
missing=()
[[ -f $keyring ]] || missing+=(debian-archive-keyring)
command -v update-ca-certificates >/dev/null || missing+=(ca-certificates)
if ((${#missing[@]})); then
  img_log "installing ${missing[*]}"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# The Dockerfile's packages, and what its runtime stage purges after.
packages=(e2fsprogs xfsprogs util-linux mount cryptsetup-bin ca-certificates base-files base-passwd)
purged=" $(sed -e ':a' -e '/\\$/{N;s/\\\n//;ba' -e '}' "$img_repo/Dockerfile" |
  sed -nE 's/.*for p in ([^;]*); do.*/\1/p' | tr -s ' ') "
[[ $purged == *" python3 "* && $purged == *" libicu72 "* ]] ||
  img_die "could not read the packages the Dockerfile purges (got:$purged)"

# A private apt for arm64 (see debian_arm64_apt); its lists and downloaded
# packages stay in _output/image/apt-arm64 for the next build.
apt=$img_out/apt-arm64
debian_arm64_apt "$apt" "$DEBIAN_MIRROR" "$DEBIAN_SECURITY_MIRROR"
export DEBIAN_FRONTEND=noninteractive

img_log "arm64 packages from $DEBIAN_MIRROR (security: ${DEBIAN_SECURITY_MIRROR:-none})"
apt-get update -qq >/dev/null
# What apt would install on an empty system, with the versions it chose.
apt-get install -s -qq "${packages[@]}" | awk '$1 == "Inst" { gsub(/[()]/, "", $3); print $2, $3 }' |
  sort >"$list.all"
[[ -s $list.all ]] || img_die "apt resolved no arm64 packages"
apt-get install -d -y -qq "${packages[@]}" >/dev/null
awk -v purged="$purged" 'index(purged, " " $1 " ") == 0' "$list.all" >"$list"
rm "$list.all"

mkdir -p "$dest/var/lib/dpkg"
: >"$dest/var/lib/dpkg/status"
keep=()
while read -r name version; do
  deb=$(debian_cached_deb "$apt/cache/archives" "$name" "$version" | tail -n1)
  [[ -n $deb ]] || img_die "apt downloaded no package file for $name $version"
  dpkg-deb -x "$deb" "$dest"
  { dpkg-deb -f "$deb" | sed '1a Status: install ok installed'; echo; } >>"$dest/var/lib/dpkg/status"
  keep+=("$deb")
done <"$list"
debian_prune_cache "$apt/cache/archives" "${keep[@]}"
debian_merge_usr "$dest"
# What the Dockerfile removes, and what debian:bookworm-slim leaves out.
rm -f "$dest/usr/sbin/xfs_scrub" "$dest/usr/sbin/xfs_scrub_all"
rm -rf "$dest"/usr/share/doc/* "$dest"/usr/share/man/* "$dest"/usr/share/info/* "$dest"/usr/share/locale/*
mkdir -p "$dest/tmp" "$dest/root" "$dest/var/tmp" "$dest/run" "$dest/proc" "$dest/sys" "$dest/dev"
chmod 1777 "$dest/tmp" "$dest/var/tmp"
chmod 0700 "$dest/root"

# base-passwd's postinst: the users and groups from its masters.
cp "$dest/usr/share/base-passwd/passwd.master" "$dest/etc/passwd"
cp "$dest/usr/share/base-passwd/group.master" "$dest/etc/group"
chmod 0644 "$dest/etc/passwd" "$dest/etc/group"

# ca-certificates' postinst: every certificate the package ships enabled,
# the bundle and the hashed links, which point into the image.
(cd "$dest/usr/share/ca-certificates" && find . -type f -name '*.crt' -printf '%P\n' | LC_ALL=C sort) \
  >"$dest/etc/ca-certificates.conf"
mkdir -p "$dest/etc/ssl/certs" "$dest/usr/local/share/ca-certificates" "$dest/etc/ca-certificates/update.d"
update-ca-certificates --fresh --certsconf "$dest/etc/ca-certificates.conf" \
  --certsdir "$dest/usr/share/ca-certificates" --localcertsdir "$dest/usr/local/share/ca-certificates" \
  --etccertsdir "$dest/etc/ssl/certs" --hooksdir "$dest/etc/ca-certificates/update.d" >/dev/null
find "$dest/etc/ssl/certs" -type l | while read -r link; do
  target=$(readlink "$link")
  [[ $target != "$dest"/* ]] || ln -sfn "${target#"$dest"}" "$link"
done
[[ -s $dest/etc/ssl/certs/ca-certificates.crt ]] || img_die "no CA bundle was written"
img_log "arm64 root filesystem: $(wc -l <"$list") packages, $(du -sm "$dest" | cut -f1) MiB"
