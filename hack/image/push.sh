#!/usr/bin/env bash
# Builds the Diskplane images under the name IMAGE (build.sh, what make image
# runs) and pushes their OCI image index (linux/amd64 and linux/arm64) with
# both images to that registry with buildah, the tool that built them, so
# that a real cluster of either architecture can pull it. Prints the pushed
# index's digest, which is the one in the index archive make image writes
# (and make release pins in its chart) when the build was up to date.
#   make push IMAGE=<registry>/<name>:<tag>
#   hack/image/push.sh [--no-build]     --no-build: push what an earlier
#                                       make image built, unchanged
#
# Environment:
#   IMAGE               <registry>/<name>:<tag>, required, e.g.
#                       111122223333.dkr.ecr.us-east-1.amazonaws.com/diskplane:v0.1.0
#   TLS_VERIFY          (true) false for a registry served over plain HTTP
#   REGISTRY_AUTH_FILE  where the registry credentials are (default: buildah
#                       login's, then ~/.docker/config.json); log in first with
#                       `buildah login <registry>`
#   PUBLIC_BASES, VERSION, COMMIT, DEBIAN_MIRROR …  as for build.sh
set -euo pipefail

usage() {
  sed -n '2,19p' "$0" | sed 's/^# \{0,1\}//'
}

build=1
for arg in "$@"; do
  case $arg in
  --no-build) build=0 ;;
  -h | --help)
    usage
    exit 0
    ;;
  *)
    echo "error: unknown argument $arg" >&2
    usage >&2
    exit 2
    ;;
  esac
done

# The name is checked before anything is built: a build takes minutes, and a
# name without a registry would go to Docker Hub.
image=${IMAGE:-}
fail_name() {
  echo "error: IMAGE=$image: $1" >&2
  echo "       give IMAGE=<registry>/<name>:<tag>, e.g. make push IMAGE=registry.example.com/storage/diskplane:v0.1.0" >&2
  exit 2
}
[[ -n $image ]] || fail_name "no image name given"
[[ $image != *@* ]] || fail_name "a digest cannot be pushed to; name a tag"
registry=${image%%/*}
[[ $image == */* && ($registry == *.* || $registry == *:* || $registry == localhost) ]] ||
  fail_name "names no registry (the part before the first / must be a host, such as ghcr.io or 127.0.0.1:5000)"
path=${image#*/}
[[ ${path##*/} == *:* ]] || fail_name "has no tag"
repository=${path%:*}
tag=${path##*:}
[[ $repository =~ ^[a-z0-9]+([._-]+[a-z0-9]+)*(/[a-z0-9]+([._-]+[a-z0-9]+)*)*$ ]] ||
  fail_name "repository $repository is not valid: lower-case letters, digits and . _ - between them, / between parts"
[[ $tag =~ ^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$ ]] ||
  fail_name "tag $tag is not valid: letters, digits, _ . - (not first), at most 128"
case ${TLS_VERIFY:-true} in
true | false) ;;
*)
  echo "error: TLS_VERIFY=$TLS_VERIFY: want true or false" >&2
  exit 2
  ;;
esac

export IMAGE=$image
# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh"
[[ $(id -u) -eq 0 ]] || img_die "push.sh needs root (buildah's overlay storage, as make image)"
img_require_tools
trap img_cleanup EXIT

if ((build)); then
  "$img_here/build.sh"
fi
img_index_exists "$img_build_index" ||
  img_die "the build storage holds no image index; run make image first, or push without --no-build"

digestfile=$(mktemp)
trap 'rm -f "$digestfile"; img_cleanup' EXIT
start=$SECONDS
img_log "pushing the image index to $IMAGE"
bah manifest push --quiet --all --format oci --tls-verify="${TLS_VERIFY:-true}" --digestfile "$digestfile" \
  "$img_build_index" "docker://$IMAGE" >/dev/null
img_log "pushed $IMAGE@$(<"$digestfile") in $((SECONDS - start))s"
echo "$(<"$digestfile")"
