#!/usr/bin/env bash
# Builds the Diskplane Linux image from ./Dockerfile with buildah, exactly as
# `docker build` would, except that the two base images are the local
# stand-ins bases.sh assembles (no registry is reachable here) and that the
# build sees this machine's Go module and build caches, so an unchanged tree
# builds in seconds. Writes the image as a docker-archive to
# _output/images/diskplane.tar (for `ctr images import` or `docker load`) and
# prints its size. With the local bases, an image and archive built from the
# same inputs (every file of the build context git does not ignore, VERSION,
# COMMIT, the bases' keys) are up to date and not built again: make demo and
# the in-cluster suites each ask for the image.
#
# Environment:
#   IMAGE             (ghcr.io/diskplane/diskplane:v<chart appVersion>) the tag
#   VERSION, COMMIT   what the binary reports (default: from git)
#   PUBLIC_BASES=1    use the Dockerfile's default bases (needs a registry);
#                     always builds, since a registry's tag moves
#   IMAGE_REBUILD=1   build even when the image is up to date
#   DEBIAN_MIRROR, DEBIAN_SECURITY_MIRROR  where the local bases' Debian
#                     comes from (default: this machine's apt sources; see
#                     bases.sh)
set -euo pipefail
# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh"
[[ $(id -u) -eq 0 ]] || img_die "build.sh needs root (buildah's overlay storage)"
img_require_tools
trap img_cleanup EXIT

VERSION=${VERSION:-$(git -C "$img_repo" describe --tags --always --dirty 2>/dev/null || echo v0.0.0-dev)}
COMMIT=${COMMIT:-$(git -C "$img_repo" rev-parse --verify -q HEAD 2>/dev/null || echo unknown)}

args=(--build-arg "VERSION=$VERSION" --build-arg "COMMIT=$COMMIT")
archive=$img_archives/diskplane.tar
key=
if [[ ${PUBLIC_BASES:-} != 1 ]]; then
  "$img_here/bases.sh"
  args+=(--pull-never --build-arg "BUILDER_IMAGE=$img_base_builder" --build-arg "BASE_IMAGE=$img_base_runtime")
  # What the image is made of. A file git lists but the tree lacks (deleted)
  # drops out of the sums, which changes the key too.
  key=$({
    echo "$IMAGE $VERSION $COMMIT"
    img_label "$img_base_runtime" diskplane.base.key
    img_label "$img_base_builder" diskplane.base.key
    git -C "$img_repo" ls-files -z -co --exclude-standard --deduplicate | sort -z |
      (cd "$img_repo" && xargs -0 sha256sum 2>/dev/null || true)
  } | sha256sum | cut -d' ' -f1)
  if [[ ${IMAGE_REBUILD:-} != 1 && -f $archive ]] && img_exists "$IMAGE" &&
    [[ $(img_label "$IMAGE" diskplane.build.key) == "$key" && $(cat "$archive.key" 2>/dev/null) == "$key" ]]; then
    img_log "$IMAGE ($VERSION): up to date, in $archive"
    exit 0
  fi
  args+=(--label "diskplane.build.key=$key")
fi

# The RUN steps of the builder stage see the host's module and build caches
# (the builder's GOPATH is /go; Go's cache is under root's home).
gomodcache=$(go env GOMODCACHE)
gocache=$(go env GOCACHE)
mkdir -p "$gomodcache" "$gocache"
# Every module of go.mod into that cache first, with this machine's Go
# settings and certificate authorities: the builder's own `go mod download`
# then finds them all and needs no network, which the container would reach
# without the machine's proxy settings and CAs (a fresh cache failed there
# with "x509: certificate signed by unknown authority").
(cd "$img_repo" && go mod download)

start=$SECONDS
img_log "building $IMAGE ($VERSION) from Dockerfile"
bah bud --quiet --layers=false --isolation chroot --network host -f "$img_repo/Dockerfile" \
  -v "$gomodcache:/go/pkg/mod" -v "$gocache:/root/.cache/go-build" \
  "${args[@]}" -t "$IMAGE" "$img_repo" >/dev/null
# Drop what the build leaves behind (the builder stage, the previous build's
# image, now untagged), so that rebuilding does not fill the disk.
img_cleanup
img_log "built $IMAGE in $((SECONDS - start))s"

# Smoke test: every tool the node plugin runs starts in the image, and the
# plugin reports the version it was built with.
ctr=$(bah from --pull-never "$IMAGE")
bah run --isolation chroot "$ctr" -- /bin/diskplane --version | grep -qF "$VERSION" ||
  img_die "the image's diskplane does not report $VERSION"
for tool in "mkfs.ext4 -V" "e2fsck -V" "resize2fs -P /dev/null" "mkfs.xfs -V" "xfs_growfs -V" "xfs_io -V" \
  "xfs_repair -V" "blkid -V" "lsblk --version" "losetup --version" "mount --version" "umount --version" \
  "fsck --version" "cryptsetup --version"; do
  # shellcheck disable=SC2086 # the tool and its version flag
  out=$(bah run --isolation chroot "$ctr" -- $tool 2>&1) || [[ $tool == resize2fs* && $out == *resize2fs* ]] ||
    img_die "$tool does not run in the image: $out"
done
img_log "smoke test passed: diskplane $VERSION and the node tools run"

rm -f "$archive.key"
img_export "$IMAGE" "$archive"
[[ -z $key ]] || echo "$key" >"$archive.key"
img_log "wrote $archive ($(du -m "$archive" | cut -f1) MiB uncompressed; $(gzip -c "$archive" | wc -c | awk '{printf "%d", $1/1048576}') MiB gzipped)"
