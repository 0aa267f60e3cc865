#!/usr/bin/env bash
# Builds the Diskplane Linux images for linux/amd64 and linux/arm64 and the
# OCI image index of both.
#
# linux/amd64 comes from ./Dockerfile with buildah, exactly as `docker build`
# would, except that the two base images are the local stand-ins bases.sh
# assembles (no registry is reachable here) and that the build sees this
# machine's Go module and build caches, so an unchanged tree builds in
# seconds. It is written as a docker-archive to _output/images/diskplane.tar
# (for `ctr images import` or `docker load`, what make demo imports).
#
# linux/arm64 is assembled without emulation, since the Dockerfile's runtime
# stage RUNs apt-get in its base: the same Debian packages for arm64,
# resolved and unpacked by rootfs-arm64.sh (the versions in
# _output/images/diskplane-arm64.packages), the plugin cross-compiled by
# `make build-linux-arm64`, committed from scratch with the amd64 image's
# labels, environment and entrypoint.
#
# Both go into one OCI image index, written as an OCI archive to
# _output/images/diskplane-index.oci.tar (tagged IMAGE) and kept in the build
# storage for make push. With the local bases, images and archives built
# from the same inputs (every file of the build context git does not ignore,
# VERSION, COMMIT, the bases' keys) are up to date and not built again: make
# demo and the in-cluster suites each ask for the image. Another IMAGE only
# tags and exports them again.
#
# Environment:
#   IMAGE             (ghcr.io/diskplane/diskplane:v<chart appVersion>) the tag
#   VERSION, COMMIT   what the binary reports (default: from git)
#   PUBLIC_BASES=1    use the Dockerfile's default bases (needs a registry);
#                     always builds, since a registry's tag moves
#   IMAGE_REBUILD=1   build even when the images are up to date
#   DEBIAN_MIRROR, DEBIAN_SECURITY_MIRROR  where the local bases' and the
#                     arm64 image's Debian comes from (default: this
#                     machine's apt sources; see bases.sh)
set -euo pipefail
# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh"
[[ $(id -u) -eq 0 ]] || img_die "build.sh needs root (buildah's overlay storage)"
img_require_tools
# The arm64 root filesystem while it is assembled.
rootfs=
trap 'rm -rf "$rootfs"; img_cleanup' EXIT

VERSION=${VERSION:-$(git -C "$img_repo" describe --tags --always --dirty 2>/dev/null || echo v0.0.0-dev)}
COMMIT=${COMMIT:-$(git -C "$img_repo" rev-parse --verify -q HEAD 2>/dev/null || echo unknown)}

args=(--build-arg "VERSION=$VERSION" --build-arg "COMMIT=$COMMIT")
archive=$img_archives/diskplane.tar
index_archive=$img_archives/diskplane-index.oci.tar
packages=$img_archives/diskplane-arm64.packages
key=
if [[ ${PUBLIC_BASES:-} != 1 ]]; then
  "$img_here/bases.sh"
  args+=(--pull-never --build-arg "BUILDER_IMAGE=$img_base_builder" --build-arg "BASE_IMAGE=$img_base_runtime")
  # What the images are made of. A file git lists but the tree lacks
  # (deleted) drops out of the sums, which changes the key too.
  key=$({
    echo "$VERSION $COMMIT"
    img_label "$img_base_runtime" diskplane.base.key
    img_label "$img_base_builder" diskplane.base.key
    git -C "$img_repo" ls-files -z -co --exclude-standard --deduplicate | sort -z |
      (cd "$img_repo" && { xargs -0 sha256sum 2>/dev/null || true; })
  } | sha256sum | cut -d' ' -f1)
  args+=(--label "diskplane.build.key=$key")
fi

# current NAME succeeds when the storage holds image NAME built from this
# key (never without one, nor under IMAGE_REBUILD=1).
current() {
  [[ -n $key && ${IMAGE_REBUILD:-} != 1 ]] && img_exists "$1" && [[ $(img_label "$1" diskplane.build.key) == "$key" ]]
}
# written FILE succeeds when FILE was written from this key (under this
# IMAGE, for the archives that carry the name).
written() {
  [[ -n $key && ${IMAGE_REBUILD:-} != 1 && -f $1 && $(cat "$1.key" 2>/dev/null) == "$key $IMAGE" ]]
}

if current "$img_build_amd64" && current "$img_build_arm64" && written "$archive" && written "$index_archive" &&
  img_index_exists "$img_build_index" && [[ $(img_label "$IMAGE" diskplane.build.key) == "$key" ]]; then
  img_log "$IMAGE ($VERSION): up to date, in $archive and (linux/amd64, linux/arm64) $index_archive"
  exit 0
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

build_amd64() {
  local start=$SECONDS ctr out tool
  img_log "building $IMAGE ($VERSION, linux/amd64) from Dockerfile"
  bah bud --quiet --layers=false --isolation chroot --network host -f "$img_repo/Dockerfile" \
    -v "$gomodcache:/go/pkg/mod" -v "$gocache:/root/.cache/go-build" \
    "${args[@]}" -t "$img_build_amd64" "$img_repo" >/dev/null
  # Drop what the build leaves behind (the builder stage, the previous
  # build's image, now untagged), so that rebuilding does not fill the disk.
  img_cleanup
  img_log "built $IMAGE (linux/amd64) in $((SECONDS - start))s"

  # Smoke test: every tool the node plugin runs starts in the image, and the
  # plugin reports the version it was built with.
  ctr=$(bah from --pull-never "$img_build_amd64")
  bah run --isolation chroot "$ctr" -- /bin/diskplane --version | grep -qF "$VERSION" ||
    img_die "the image's diskplane does not report $VERSION"
  for tool in "mkfs.ext4 -V" "e2fsck -V" "resize2fs -P /dev/null" "mkfs.xfs -V" "xfs_growfs -V" "xfs_io -V" \
    "xfs_repair -V" "blkid -V" "lsblk --version" "losetup --version" "mount --version" "umount --version" \
    "fsck --version" "cryptsetup --version"; do
    # shellcheck disable=SC2086 # the tool and its version flag
    out=$(bah run --isolation chroot "$ctr" -- $tool 2>&1) || [[ $tool == resize2fs* && $out == *resize2fs* ]] ||
      img_die "$tool does not run in the image: $out"
  done
  bah rm "$ctr" >/dev/null
  img_log "smoke test passed: diskplane $VERSION and the node tools run"
}

# build_arm64 assembles the linux/arm64 image: no RUN, nothing executed for
# arm64.
build_arm64() {
  local start=$SECONDS ctr mnt label env entry entrypoint=()
  mkdir -p "$img_out" "$img_archives"
  rootfs=$(mktemp -d "$img_out/rootfs-arm64.XXXXXX")
  rmdir "$rootfs"
  "$img_here/rootfs-arm64.sh" "$rootfs" "$packages"
  make -C "$img_repo" --no-print-directory build-linux-arm64 VERSION="$VERSION" COMMIT="$COMMIT" >/dev/null
  install -m 0755 "$img_repo/_output/bin/linux-arm64/diskplane" "$rootfs/usr/bin/diskplane"
  ctr=$(bah from scratch)
  mnt=$(bah mount "$ctr")
  cp -a "$rootfs/." "$mnt/"
  bah umount "$ctr" >/dev/null
  rm -rf "$rootfs"
  # The amd64 image's configuration: the Dockerfile's labels and entrypoint,
  # the base's environment.
  while IFS= read -r entry; do
    [[ -z $entry ]] || entrypoint+=("\"$entry\"")
  done < <(bah inspect --type image --format '{{range .OCIv1.Config.Entrypoint}}{{.}}{{"\n"}}{{end}}' "$img_build_amd64")
  ((${#entrypoint[@]} > 0)) || img_die "the amd64 image has no entrypoint to give the arm64 image"
  local config=(--os linux --arch arm64 --variant v8 --label "diskplane.build.key=$key"
    --label "diskplane.arm64.packages=$(sha256sum "$packages" | cut -d' ' -f1)"
    --entrypoint "[$(IFS=,; echo "${entrypoint[*]}")]")
  # shellcheck disable=SC2016 # Go template variables, not shell expansions
  local labels='{{range $k, $v := .OCIv1.Config.Labels}}{{$k}}={{$v}}{{"\n"}}{{end}}'
  while IFS= read -r label; do
    [[ -z $label || $label == diskplane.build.key=* ]] || config+=(--label "$label")
  done < <(bah inspect --type image --format "$labels" "$img_build_amd64")
  while IFS= read -r env; do
    [[ -z $env ]] || config+=(--env "$env")
  done < <(bah inspect --type image --format '{{range .OCIv1.Config.Env}}{{.}}{{"\n"}}{{end}}' "$img_build_amd64")
  bah config "${config[@]}" "$ctr"
  bah commit --quiet --rm "$ctr" "$img_build_arm64" >/dev/null
  img_log "assembled $img_build_arm64 (linux/arm64) in $((SECONDS - start))s"
}

# build_index writes the OCI image index of both images to the storage and
# as an OCI archive, and checks the archive (tests/images).
build_index() {
  local start=$SECONDS
  bah manifest rm "$img_build_index" >/dev/null 2>&1 || true
  bah manifest create "$img_build_index" >/dev/null
  # By image ID: buildah takes a name for one in a registry.
  bah manifest add "$img_build_index" "$(bah inspect --type image --format '{{.FromImageID}}' "$img_build_amd64")" >/dev/null
  bah manifest add "$img_build_index" "$(bah inspect --type image --format '{{.FromImageID}}' "$img_build_arm64")" >/dev/null
  rm -f "$index_archive.key" "$index_archive.tmp"
  bah manifest push --quiet --all --format oci "$img_build_index" "oci-archive:$index_archive.tmp:$IMAGE" >/dev/null
  mv "$index_archive.tmp" "$index_archive"
  (cd "$img_repo" && DISKPLANE_IMAGE_INDEX="$index_archive" DISKPLANE_IMAGE_VERSION="$VERSION" \
    go test -count=1 -run '^TestLinuxImageIndex' ./tests/images) >"$img_out/index-check.log" 2>&1 ||
    { cat "$img_out/index-check.log" >&2; img_die "the image index does not pass its checks (tests/images)"; }
  [[ -z $key ]] || echo "$key $IMAGE" >"$index_archive.key"
  img_log "wrote $index_archive (linux/amd64, linux/arm64; $(du -m "$index_archive" | cut -f1) MiB) and checked it in $((SECONDS - start))s"
}

current "$img_build_amd64" || build_amd64
current "$img_build_arm64" || build_arm64
bah tag "$img_build_amd64" "$IMAGE"
if ! written "$index_archive" || ! img_index_exists "$img_build_index"; then
  build_index
fi

rm -f "$archive.key"
img_export "$IMAGE" "$archive"
[[ -z $key ]] || echo "$key $IMAGE" >"$archive.key"
img_log "wrote $archive (linux/amd64; $(du -m "$archive" | cut -f1) MiB uncompressed; $(gzip -c "$archive" | wc -c | awk '{printf "%d", $1/1048576}') MiB gzipped)"
