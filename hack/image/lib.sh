# shellcheck shell=bash disable=SC2034 # the scripts that source this use the names
# Shared by the image scripts: where images are built and written, and the
# buildah invocation. Source it; it has no side effects.
#
# buildah keeps its storage under _output/image (git-ignored) rather than in
# /var/lib/containers, so that `make clean` removes everything the image
# build made; its run state lives on /run, a tmpfs. IMAGE_STORAGE and
# IMAGE_RUNROOT move both elsewhere (tests use storage of their own).
img_here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=../lib/debian.sh
source "$img_here/../lib/debian.sh"
img_repo=$(cd "$img_here/../.." && pwd)
img_out=$img_repo/_output/image
img_archives=$img_repo/_output/images
img_storage=${IMAGE_STORAGE:-$img_out/storage}
img_runroot=${IMAGE_RUNROOT:-/run/diskplane-image}

# The image names: the chart's defaults, so that an imported image is found
# under exactly the name the chart (or the kustomize base) asks for.
img_app_version=$(sed -nE 's/^appVersion: "?([^"]+)"?$/\1/p' "$img_repo/charts/diskplane/Chart.yaml")
IMAGE=${IMAGE:-ghcr.io/diskplane/diskplane:v$img_app_version}

# Local stand-ins for the Dockerfile's default bases (which a user pulls from
# Docker Hub): Debian bookworm from debootstrap, and that plus this
# machine's Go for the builder.
img_base_runtime=localhost/diskplane-base/debian:bookworm-slim
img_base_builder=localhost/diskplane-base/golang:bookworm

# What make image keeps in the storage besides IMAGE (the linux/amd64 image,
# also tagged $img_build_amd64): the linux/arm64 image and the OCI image
# index of both that make push pushes. Their names do not depend on IMAGE,
# so that a build under another name reuses them when nothing else changed.
img_build_amd64=localhost/diskplane-build/diskplane:linux-amd64
img_build_arm64=localhost/diskplane-build/diskplane:linux-arm64
img_build_index=localhost/diskplane-build/diskplane:index

img_log() { printf '%s %s\n' "$(date +%H:%M:%S)" "$*"; }

img_die() { printf 'error: %s\n' "$*" >&2; exit 1; }

# bah runs buildah on the private storage. Builds use chroot isolation and
# the host's network: there is no container network here, and RUN steps
# (apt-get) need the Debian mirror.
bah() {
  buildah --root "$img_storage" --runroot "$img_runroot" --storage-driver overlay "$@"
}

# img_require_tools installs buildah and debootstrap (Debian packages) when
# they are missing.
img_require_tools() {
  local missing=() p
  for p in buildah debootstrap; do command -v "$p" >/dev/null || missing+=("$p"); done
  ((${#missing[@]} == 0)) && return 0
  [[ $(id -u) -eq 0 ]] || img_die "missing ${missing[*]}; run: sudo apt-get install -y ${missing[*]}"
  img_log "installing ${missing[*]}"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null ||
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null; }
}

# img_cleanup removes what builds leave in the private storage (working
# containers, also of a failed build; untagged images) and unmounts the
# storage's own mount, so that nothing stays mounted under _output between
# builds. Every script runs it on exit: one build at a time.
img_cleanup() {
  [[ -d $img_storage ]] || return 0
  bah rm --all >/dev/null 2>&1 || true
  bah rmi --prune >/dev/null 2>&1 || true
  if mountpoint -q "$img_storage/overlay"; then
    umount "$img_storage/overlay" 2>/dev/null || true
  fi
}

# img_exists NAME succeeds when the private storage holds image NAME.
img_exists() { bah inspect --type image "$1" >/dev/null 2>&1; }

# img_index_exists NAME succeeds when the private storage holds the image
# index (manifest list) NAME.
img_index_exists() { bah manifest inspect "$1" >/dev/null 2>&1; }

# img_label NAME KEY prints the value of label KEY of image NAME.
img_label() { bah inspect --type image --format "{{index .ImageAnnotations \"$2\"}}{{index .OCIv1.Config.Labels \"$2\"}}" "$1" 2>/dev/null; }

# img_export NAME ARCHIVE writes image NAME as a docker-archive that
# `ctr images import` (and `docker load`) accept, tagged NAME.
img_export() {
  mkdir -p "$(dirname "$2")"
  rm -f "$2.tmp"
  bah push --quiet "$1" "docker-archive:$2.tmp:$1" >/dev/null
  mv "$2.tmp" "$2"
}
