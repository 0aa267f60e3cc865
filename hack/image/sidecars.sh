#!/usr/bin/env bash
# Builds images of the CSI sidecars for the local cluster, under exactly the
# names the chart uses (registry.k8s.io/sig-storage/csi-provisioner:v6.3.0,
# ...), from the binaries hack/local-cluster/build.sh builds from the same
# pinned releases. Each image is one static binary as its entrypoint. Writes
# _output/images/<sidecar>.tar (docker-archive).
#
# node-driver-registrar and livenessprobe are not built here (see
# hack/local-cluster/README.md): the local cluster runs the node plugin as a
# single container, which registers itself.
set -euo pipefail
# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh"
[[ $(id -u) -eq 0 ]] || img_die "sidecars.sh needs root (buildah's overlay storage)"
img_require_tools
trap img_cleanup EXIT

bin_dir=${LOCAL_CLUSTER_DIR:-$img_repo/_output/local-cluster}/bin
helm=$("$img_repo/hack/chart/helm.sh")

# The images the chart's controller runs, read from its default rendering so
# that the names cannot drift from values.yaml.
mapfile -t images < <("$helm" template diskplane "$img_repo/charts/diskplane" |
  sed -nE 's|^ *image: *"?(registry\.k8s\.io/sig-storage/[^"]+)"?$|\1|p' | sort -u)
((${#images[@]} > 0)) || img_die "no sidecar images found in the chart's rendering"

for image in "${images[@]}"; do
  name=${image##*/}
  name=${name%%:*}
  binary=$bin_dir/$name
  [[ -x $binary ]] || img_die "$binary is missing; run hack/local-cluster/build.sh sidecars"
  archive=$img_archives/$name.tar
  sum=$(sha256sum "$binary" | cut -d' ' -f1)
  if [[ -f $archive ]] && img_exists "$image" && [[ $(img_label "$image" diskplane.binary.sha256) == "$sum" ]]; then
    img_log "$image: up to date"
    continue
  fi
  ctr=$(bah from scratch)
  bah copy --quiet --chmod 0755 "$ctr" "$binary" "/$name" >/dev/null
  bah config --entrypoint "[\"/$name\"]" --cmd '[]' --user 65532:65532 \
    --label diskplane.binary.sha256="$sum" "$ctr"
  bah commit --quiet --rm "$ctr" "$image" >/dev/null
  img_export "$image" "$archive"
  img_log "$image: wrote $archive ($(du -m "$archive" | cut -f1) MiB)"
done
