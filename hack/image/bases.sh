#!/usr/bin/env bash
# Assembles, in the private buildah storage, local stand-ins for the two
# public base images the Dockerfile pulls by default, because no registry is
# reachable here:
#   localhost/diskplane-base/debian:bookworm-slim  for debian:bookworm-slim:
#       debootstrap --variant=minbase of Debian bookworm, without apt lists,
#       docs, man pages and locales (and dpkg told to keep leaving them out)
#   localhost/diskplane-base/golang:bookworm       for golang:1.26-bookworm:
#       that, plus make and ca-certificates from apt and this machine's Go
#       (/usr/local/go) at /usr/local/go
# Each is rebuilt only when its inputs change (this script, the Debian
# mirrors, the Go version): the key is recorded as an image label.
#
# The Debian packages come from the mirrors this machine's apt uses
# (/etc/apt/sources.list and sources.list.d): the source of the bookworm suite,
# and of bookworm-security for security updates. The base's own apt lists
# bookworm, bookworm-updates and bookworm-security there, as the Debian image
# does, so the Dockerfile installs current packages.
#
# Environment:
#   DEBIAN_MIRROR           (this machine's bookworm source; on a Debian
#                           machine of another release, its Debian archive)
#                           the Debian mirror, e.g. http://mirror.example/debian
#   DEBIAN_SECURITY_MIRROR  (this machine's bookworm-security source; none:
#                           no security suite) e.g. http://mirror.example/debian-security
set -euo pipefail
# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh"
[[ $(id -u) -eq 0 ]] || img_die "bases.sh needs root (debootstrap, buildah)"
img_require_tools
trap img_cleanup EXIT

DEBIAN_MIRROR=${DEBIAN_MIRROR:-$(debian_apt_source bookworm)}
DEBIAN_MIRROR=${DEBIAN_MIRROR:-$(debian_apt_archive)}
[[ -n $DEBIAN_MIRROR ]] ||
  img_die "this machine's apt sources name no Debian mirror; set DEBIAN_MIRROR to a Debian mirror (http://MIRROR/debian)"
DEBIAN_SECURITY_MIRROR=${DEBIAN_SECURITY_MIRROR:-$(debian_apt_source bookworm-security)}

goroot=$(go env GOROOT)
script_sum=$(sha256sum "$img_here/bases.sh" | cut -d' ' -f1)
runtime_key=$(echo "$script_sum bookworm $DEBIAN_MIRROR $DEBIAN_SECURITY_MIRROR" | sha256sum | cut -d' ' -f1)
builder_key=$(echo "$runtime_key $("$goroot/bin/go" version)" | sha256sum | cut -d' ' -f1)

build_runtime_base() {
  local rootfs ctr mnt
  mkdir -p "$img_out"
  rootfs=$(mktemp -d "$img_out/rootfs.XXXXXX")
  img_log "debootstrap bookworm (minbase) from $DEBIAN_MIRROR (security: ${DEBIAN_SECURITY_MIRROR:-none})"
  if ! debootstrap --variant=minbase bookworm "$rootfs" "$DEBIAN_MIRROR" >"$img_out/debootstrap.log" 2>&1; then
    rm -rf "$rootfs"
    img_die "debootstrap failed; see $img_out/debootstrap.log"
  fi
  # What debian:bookworm-slim leaves out, and tells dpkg to keep leaving out.
  rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/* \
    "$rootfs"/usr/share/doc/* "$rootfs"/usr/share/man/* "$rootfs"/usr/share/info/* \
    "$rootfs"/usr/share/locale/* "$rootfs"/var/log/*.log "$rootfs"/var/cache/ldconfig/aux-cache \
    "$rootfs"/etc/resolv.conf "$rootfs"/etc/hostname
  cat >"$rootfs/etc/dpkg/dpkg.cfg.d/slim" <<'CFG'
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/info/*
path-exclude /usr/share/locale/*
CFG
  {
    echo "deb $DEBIAN_MIRROR bookworm main"
    echo "deb $DEBIAN_MIRROR bookworm-updates main"
    [[ -z $DEBIAN_SECURITY_MIRROR ]] || echo "deb $DEBIAN_SECURITY_MIRROR bookworm-security main"
  } >"$rootfs/etc/apt/sources.list"
  cat >"$rootfs/etc/apt/apt.conf.d/docker-clean" <<'CFG'
DPkg::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
APT::Update::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
Dir::Cache::pkgcache "";
Dir::Cache::srcpkgcache "";
CFG
  ctr=$(bah from scratch)
  mnt=$(bah mount "$ctr")
  cp -a "$rootfs/." "$mnt/"
  bah umount "$ctr" >/dev/null
  rm -rf "$rootfs"
  bah config --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin --cmd bash \
    --label diskplane.base.key="$runtime_key" "$ctr"
  bah commit --quiet --rm "$ctr" "$img_base_runtime" >/dev/null
}

build_builder_base() {
  local ctr mnt
  ctr=$(bah from --pull-never "$img_base_runtime")
  bah run --isolation chroot --network host "$ctr" -- sh -c \
    'apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends make ca-certificates >/dev/null && rm -rf /var/lib/apt/lists/*'
  mnt=$(bah mount "$ctr")
  mkdir -p "$mnt/usr/local/go" "$mnt/go"
  cp -a "$goroot/." "$mnt/usr/local/go/"
  bah umount "$ctr" >/dev/null
  # As the golang image: GOPATH /go, the toolchain on PATH, no toolchain
  # downloads.
  bah config --env GOPATH=/go --env GOTOOLCHAIN=local \
    --env PATH=/go/bin:/usr/local/go/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    --workingdir /go --label diskplane.base.key="$builder_key" "$ctr"
  bah commit --quiet --rm "$ctr" "$img_base_builder" >/dev/null
}

# ensure NAME KEY BUILD builds image NAME with BUILD unless it exists with KEY.
ensure() {
  local start=$SECONDS
  if img_exists "$1" && [[ $(img_label "$1" diskplane.base.key) == "$2" ]]; then
    img_log "$1: up to date"
    return 0
  fi
  img_log "$1: building"
  "$3"
  img_log "$1: built in $((SECONDS - start))s"
}

ensure "$img_base_runtime" "$runtime_key" build_runtime_base
ensure "$img_base_builder" "$builder_key" build_builder_base
