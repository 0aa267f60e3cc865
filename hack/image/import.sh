#!/usr/bin/env bash
# Imports the image archives under _output/images (make image, make
# image-sidecars) into the local cluster's containerd (every worker's in a
# multi-node cluster), in the k8s.io namespace the kubelet uses, so that pods
# find them without a pull.
#   hack/image/import.sh [ARCHIVE...]    default: every _output/images/*.tar
#                                        but the OCI image index, whose
#                                        linux/amd64 image diskplane.tar is;
#                                        an index given (make release's) is
#                                        also named <repository>@<digest>
set -euo pipefail
# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=../local-cluster/lib.sh
source "$img_repo/hack/local-cluster/lib.sh"
lc_require_root import.sh

archives=("$@")
if ((${#archives[@]} == 0)); then
  for archive in "$img_archives"/*.tar; do
    [[ $archive == *.oci.tar ]] || archives+=("$archive")
  done
fi
[[ -f ${archives[0]:-} ]] || lc_die "no image archives in $img_archives; run make image (and make image-sidecars)"
# A multi-node cluster (WORKERS=N up.sh) has a containerd per worker and none
# on the host: every worker gets the images.
if [[ -n $(lc_worker_ids) ]]; then
  "$lc_here/worker.sh" import "${archives[@]}"
  exit 0
fi
lc_pid_alive containerd || lc_die "the local cluster's containerd is not running; run hack/local-cluster/up.sh first"
lc_import_images "$lc_containerd_sock" "${archives[@]}"
ctr --address "$lc_containerd_sock" --namespace k8s.io images list -q | grep -E 'diskplane|sig-storage' || true
