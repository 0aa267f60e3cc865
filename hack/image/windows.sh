#!/usr/bin/env bash
# Builds the Windows images of Dockerfile.windows as far as a Linux machine
# without a Windows base image can (docs/windows.md, "Images"):
#
#   HostProcess  the image itself, for windows/amd64, written by
#                hack/image/winimage as an OCI image archive (not buildah:
#                it writes Linux layers only): the stage hostprocess of
#                Dockerfile.windows applied onto one Windows base layer that
#                carries what the HostProcess base image carries (its
#                registry hives) next to diskplane.exe, so that no base is
#                pulled. Written to
#                _output/images/windows/diskplane-windows-hostprocess.oci.tar,
#                named as the chart expects; import it on a Windows node with
#                `ctr -n k8s.io images import`, or push it with
#                `skopeo copy oci-archive:… docker://…`.
#   csi-proxy    (as root) a check of the stage nanoserver: buildah builds it
#                with the local builder stand-in (bases.sh) and an empty
#                stand-in for Nano Server, so that every instruction but the
#                base's runs; the result is checked and then dropped.
#
# Then tests/images checks both (TestWindowsHostProcessImage,
# TestWindowsNanoServerStage): the OCI layout and its digests, the platform,
# the layer's Windows format and hives, entrypoint, user and labels against
# the Dockerfile, and diskplane.exe a Windows amd64 program of VERSION.
# The HostProcess archive is reproducible: the binary is stamped with the
# commit's date (SOURCE_DATE_EPOCH), and so is every entry of the archive.
#
# Environment:
#   WINDOWS_IMAGE     (ghcr.io/diskplane/diskplane-windows:v<chart appVersion>-hostprocess)
#                     the HostProcess image's name
#   VERSION, COMMIT   what the binary reports (default: from git)
#   SOURCE_DATE_EPOCH (the commit's time) the images' and the binary's date
set -euo pipefail
# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh"

VERSION=${VERSION:-$(git -C "$img_repo" describe --tags --always --dirty 2>/dev/null || echo v0.0.0-dev)}
COMMIT=${COMMIT:-$(git -C "$img_repo" rev-parse --verify -q HEAD 2>/dev/null || echo unknown)}
SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git -C "$img_repo" log -1 --format=%ct 2>/dev/null || echo 0)}
export SOURCE_DATE_EPOCH
chart_image=ghcr.io/diskplane/diskplane-windows:v$img_app_version-hostprocess
name=${WINDOWS_IMAGE:-$chart_image}
hostprocess=$img_archives/windows/diskplane-windows-hostprocess.oci.tar
nanoserver_check=$img_out/windows-nanoserver-check.oci.tar
check_image=localhost/diskplane-windows-check:nanoserver
# An empty image for the csi-proxy flavour's base. Its own config says
# linux/amd64: buildah 1.28 looks a stage's base up with the platform of the
# builder stage's FROM --platform, and refuses a windows one; --platform
# windows/amd64 makes the result windows/amd64 all the same.
nanoserver_standin=localhost/diskplane-base/nanoserver:empty
start=$SECONDS

img_log "make build-windows ($VERSION)"
make -C "$img_repo" --no-print-directory build-windows VERSION="$VERSION" COMMIT="$COMMIT" \
  BUILD_DATE="$(date -u -d "@$SOURCE_DATE_EPOCH" +%Y-%m-%dT%H:%M:%SZ)" >/dev/null
(cd "$img_repo" && go run ./hack/image/winimage -dockerfile Dockerfile.windows -target hostprocess \
  -context . -name "$name" -build-arg VERSION="$VERSION" -o "$hostprocess") >/dev/null
img_log "wrote $hostprocess: $name ($(du -m "$hostprocess" | cut -f1) MiB)"

checks=(-run '^TestWindowsHostProcessImage$')
env=(DISKPLANE_WINDOWS_IMAGE="$hostprocess" DISKPLANE_WINDOWS_VERSION="$VERSION")
[[ $name == "$chart_image" ]] || env+=(DISKPLANE_WINDOWS_IMAGE_NAME="$name")
if [[ $(id -u) -eq 0 ]]; then
  img_require_tools
  trap img_cleanup EXIT
  "$img_here/bases.sh" >/dev/null
  if ! img_exists "$nanoserver_standin"; then
    ctr=$(bah from scratch)
    bah config --os linux --arch amd64 --env PATH- "$ctr"
    bah commit --quiet --rm "$ctr" "$nanoserver_standin" >/dev/null
  fi
  # The builder stage's go commands use this machine's caches, filled first
  # with its own settings (see build.sh).
  gomodcache=$(go env GOMODCACHE)
  gocache=$(go env GOCACHE)
  (cd "$img_repo" && go mod download)
  img_log "building Dockerfile.windows --target nanoserver on an empty stand-in for Nano Server"
  bah bud --quiet --layers=false --isolation chroot --network host --pull-never --platform windows/amd64 \
    -f "$img_repo/Dockerfile.windows" --target nanoserver \
    -v "$gomodcache:/go/pkg/mod" -v "$gocache:/root/.cache/go-build" \
    --build-arg BUILDER_IMAGE="$img_base_builder" --build-arg NANOSERVER_IMAGE="$nanoserver_standin" \
    --build-arg VERSION="$VERSION" --build-arg COMMIT="$COMMIT" -t "$check_image" "$img_repo" >/dev/null
  mkdir -p "$(dirname "$nanoserver_check")"
  rm -f "$nanoserver_check"
  bah push --quiet --disable-compression "$check_image" "oci-archive:$nanoserver_check:$check_image" >/dev/null
  bah rmi "$check_image" >/dev/null
  checks=(-run '^TestWindows(HostProcessImage|NanoServerStage)$')
  env+=(DISKPLANE_WINDOWS_NANOSERVER_CHECK="$nanoserver_check")
else
  img_log "!!! not root: the check of the csi-proxy flavour's Dockerfile stage (buildah) is left out !!!"
fi

(cd "$img_repo" && env "${env[@]}" go test -count=1 "${checks[@]}" ./tests/images)
rm -f "$nanoserver_check"
img_log "Windows images built and checked in $((SECONDS - start))s"
