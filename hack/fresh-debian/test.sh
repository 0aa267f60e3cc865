#!/usr/bin/env bash
# make test-fresh-debian: what a newcomer meets. README promises that `make
# test` works on a fresh Debian 12 machine with Go, make and git; this checks
# it where nothing else is installed. It makes a minimal Debian 12 root with
# mmdebstrap (--variant=minbase, from this machine's Debian mirror), copies
# this machine's Go into it, installs only README's other prerequisites
# (make, git), clones this repository's HEAD into it and runs `make test`
# there as root, with /dev, /proc and /sys of this machine (loop devices and
# mounts), empty Go caches and none of this machine's Go settings. The log is
# _output/fresh-debian/make-test.log; the root is deleted afterwards unless
# FRESH_DEBIAN_KEEP=1.
#
# Two things of this machine go in besides Go, because its network needs
# them, not because a user's would: its own certificate authorities
# (/usr/local/share/ca-certificates, for the egress proxy) and
# /etc/resolv.conf.
#
#   FRESH_DEBIAN_TARGET   the make target to run (default: test)
# Needs root; installs mmdebstrap. Takes the time of a cold `make test`
# (module downloads and a race build of everything) and a few minutes more.
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
# shellcheck source=hack/lib/debian.sh
source "$repo/hack/lib/debian.sh"
log() { printf '%s fresh-debian: %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { printf 'fresh-debian: error: %s\n' "$*" >&2; exit 1; }
[[ $(id -u) -eq 0 ]] || die "needs root (mmdebstrap, chroot, loop devices)"
target=${FRESH_DEBIAN_TARGET:-test}

dir=$repo/_output/fresh-debian
root=$dir/root
log_file=$dir/make-$target.log
mirror=$(debian_apt_source bookworm)
[[ -n $mirror ]] || die "this machine's apt sources name no Debian bookworm mirror"
security=$(debian_apt_source bookworm-security)
goroot=$(go env GOROOT)

command -v mmdebstrap >/dev/null || {
  log "installing mmdebstrap"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends mmdebstrap >/dev/null
}

mounted=()
cleanup() {
  local i
  for ((i = ${#mounted[@]} - 1; i >= 0; i--)); do
    umount -R "${mounted[i]}" 2>/dev/null || umount -lR "${mounted[i]}" 2>/dev/null || true
  done
  if [[ ${FRESH_DEBIAN_KEEP:-} != 1 && -d $root ]]; then
    # Nothing may still be mounted below it before it goes.
    if grep -q " $root" /proc/self/mountinfo; then
      log "something is still mounted below $root; left it"
    else
      rm -rf "$root"
    fi
  fi
}
trap cleanup EXIT

rm -rf "$root"
mkdir -p "$dir"
start=$SECONDS
log "a minimal Debian 12 root from $mirror (mmdebstrap --variant=minbase)"
sources=("deb $mirror bookworm main" "deb $mirror bookworm-updates main")
[[ -z $security ]] || sources+=("deb $security bookworm-security main")
mmdebstrap --quiet --variant=minbase bookworm "$root" "${sources[@]}"
log "root made in $((SECONDS - start)) s: $(du -sh "$root" | cut -f1)"

# This machine's network: its CAs (kept by update-ca-certificates, which the
# ca-certificates package runs when hack/install-deps.sh installs it) and
# its resolver.
mkdir -p "$root/usr/local/share/ca-certificates"
cp /usr/local/share/ca-certificates/*.crt "$root/usr/local/share/ca-certificates/" 2>/dev/null || true
cp /etc/resolv.conf "$root/etc/resolv.conf"

log "copying Go ($goroot, $(go version | cut -d' ' -f3)) and cloning $(git -C "$repo" rev-parse --short HEAD)"
cp -a "$goroot" "$root/usr/local/go"
git clone -q --no-hardlinks "$repo" "$root/src/diskplane"

# The root a mount point of its own, as a machine's / is: buildah (make
# test's image tests) makes / a private mount, which fails in a chroot whose
# root is a plain directory.
mount --bind "$root" "$root"
mounted+=("$root")
for m in proc sys dev; do
  mount --rbind "/$m" "$root/$m"
  mount --make-rslave "$root/$m"
  mounted+=("$root/$m")
done

in_root() {
  chroot "$root" /usr/bin/env -i HOME=/root LANG=C.UTF-8 TERM=dumb \
    PATH=/usr/local/go/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin "$@"
}
log "README's prerequisites besides Go: make and git"
in_root sh -c 'apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends make git >/dev/null'
log "make $target in the fresh root (output in $log_file)"
test_start=$SECONDS
rc=0
in_root sh -c "cd /src/diskplane && make $target" >"$log_file" 2>&1 || rc=$?
tail -n 40 "$log_file"
if ((rc != 0)); then
  die "make $target failed in a fresh Debian 12 root after $((SECONDS - test_start)) s (exit status $rc); the log is $log_file"
fi
log "make $target passed in a fresh Debian 12 root: $((SECONDS - test_start)) s for it, $((SECONDS - start)) s in all"
