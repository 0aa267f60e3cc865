#!/usr/bin/env bash
# Writes the artifacts of Diskplane release VERSION into
# _output/release/VERSION, everything a user needs to install it on amd64
# and arm64 nodes (docs/install.md, "Release artifacts"):
#   diskplane-X.Y.Z.tgz          the Helm chart at version X.Y.Z (appVersion
#                                X.Y.Z), its plugin image pinned by digest:
#                                image.digest is the image index's
#   diskplane-index.oci.tar      that image index (linux/amd64, linux/arm64)
#                                as an OCI archive, built by make image
#   diskplane-X.Y.Z.yaml         the kustomize base rendered from that chart:
#                                one multi-document YAML, image pinned too
#   diskplane-X.Y.Z.cdx.json     a CycloneDX SBOM of the Go modules the
#                                plugin links (cyclonedx-gomod, pinned)
#   CHANGELOG.md                 the changelog with Unreleased moved under
#                                "## [X.Y.Z] - <today>"
#   SHA256SUMS                   the SHA-256 of each of the above
# and links _output/release/latest to that directory and
# _output/release/diskplane.tgz to its chart. make test-release checks them.
#   make release VERSION=vX.Y.Z
#
# Environment:
#   VERSION            vX.Y.Z or vX.Y.Z-PRERELEASE, required
#   IMAGE              (ghcr.io/diskplane/diskplane:VERSION) the name the
#                      images are built and tagged under; its repository is
#                      the chart's image.repository
#   RELEASE_CHANGELOG  1: also move Unreleased in CHANGELOG.md itself (a
#                      maintainer cutting the release); otherwise the tree
#                      is left as it was
#   HELM               the Helm binary (default: hack/chart/helm.sh builds it)
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
die() {
  printf 'error: %s\n' "$*" >&2
  exit 1
}
log() { printf '%s %s\n' "$(date +%H:%M:%S)" "$*"; }

version=${VERSION:-}
[[ $version =~ ^v([0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?)$ ]] ||
  { echo "error: VERSION=$version: give VERSION=vX.Y.Z, e.g. make release VERSION=v0.1.0" >&2; exit 2; }
semver=${BASH_REMATCH[1]}
image=${IMAGE:-ghcr.io/diskplane/diskplane:$version}
[[ ${image##*/} == *:* && $image != *@* ]] || { echo "error: IMAGE=$image: give <registry>/<name>:<tag>" >&2; exit 2; }
repository=${image%:*}
[[ $(id -u) -eq 0 ]] || die "release.sh needs root (make image: buildah's overlay storage)"

start=$SECONDS
releases=$repo/_output/release
out=$releases/$version
helm=${HELM:-$("$repo/hack/chart/helm.sh")}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
rm -rf "$out"
mkdir -p "$out"

# The images, and the digest of their index: what the chart pins. A release
# starts its arm64 image's programs under qemu-user in the index's checks
# (tests/images): a skip for want of qemu-aarch64-static fails here.
log "images: $image ($version), linux/amd64 and linux/arm64"
"$repo/hack/install-deps.sh" arm64
VERSION=$version IMAGE=$image DISKPLANE_REQUIRE_QEMU_TESTS=1 "$repo/hack/image/build.sh"
cp "$repo/_output/images/diskplane-index.oci.tar" "$out/diskplane-index.oci.tar"
digest=$(tar -xOf "$out/diskplane-index.oci.tar" index.json | grep -oE '"digest": *"sha256:[0-9a-f]{64}"' |
  grep -oE 'sha256:[0-9a-f]{64}') || true
[[ $digest =~ ^sha256:[0-9a-f]{64}$ ]] || die "the index archive's index.json names no single image index (got: $digest)"

# The chart: a copy at version X.Y.Z whose values pin the image index.
cp -a "$repo/charts/diskplane" "$work/diskplane"
sed -i -E -e "s/^version: .*/version: $semver/" -e "s/^appVersion: .*/appVersion: \"$semver\"/" "$work/diskplane/Chart.yaml"
awk -v repo="$repository" -v digest="$digest" '
  /^image:/ { plugin = 1; print; next }
  plugin && /^[^ #]/ { plugin = 0 }
  plugin && /^  repository:/ { print "  repository: " repo; next }
  plugin && /^  digest:/ { print "  digest: \"" digest "\""; pinned = 1; next }
  { print }
  END { if (!pinned) exit 1 }
' "$repo/charts/diskplane/values.yaml" >"$work/diskplane/values.yaml" || die "values.yaml has no image.digest to pin"
chart=$(CHART_DIR=$work/diskplane CHART_VERSION=$semver APP_VERSION=$semver OUTPUT_DIR=$out HELM=$helm \
  "$repo/hack/chart/package.sh" 2>/dev/null)
log "chart: $chart (image $repository@$digest)"
CHART_DIR=$work/diskplane HELM=$helm "$repo/hack/chart/kustomize.sh" --bundle "$out/diskplane-$semver.yaml" >/dev/null
log "kustomize bundle: $out/diskplane-$semver.yaml"

# The SBOM of the modules the plugin links, as the images' binaries are built
# (linux, cgo off; arm64 links the same modules, which make test-release
# checks).
sbom=$("$repo/hack/tools/build.sh" cyclonedx-gomod github.com/CycloneDX/cyclonedx-gomod/cmd/cyclonedx-gomod)
(cd "$repo" && GOOS=linux GOARCH=amd64 CGO_ENABLED=0 GOFLAGS=-trimpath "$sbom" app -json -licenses=false \
  -output "$out/diskplane-$semver.cdx.json" -main cmd/diskplane . 2>"$work/sbom.log") ||
  { cat "$work/sbom.log" >&2; die "cyclonedx-gomod failed"; }
log "SBOM: $out/diskplane-$semver.cdx.json"

# The changelog, released; in the tree only when asked.
(cd "$repo" && go run ./hack/release/changelog -version "$semver" -out "$out/CHANGELOG.md")
if [[ ${RELEASE_CHANGELOG:-} == 1 ]]; then
  (cd "$repo" && go run ./hack/release/changelog -version "$semver")
  log "CHANGELOG.md: Unreleased moved under [$semver]"
fi

(cd "$out" && sha256sum -- CHANGELOG.md diskplane-* >SHA256SUMS)
ln -sfn "$version" "$releases/latest"
ln -sfn "$version/diskplane-$semver.tgz" "$releases/diskplane.tgz"
log "release $version in $((SECONDS - start))s: $out"
(cd "$out" && ls -l -- *)
echo "chart: $releases/diskplane.tgz -> $chart"
