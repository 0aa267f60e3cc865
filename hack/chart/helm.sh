#!/usr/bin/env bash
# Builds the pinned Helm (hack/tools/helm, its own Go module) into
# _output/tools/helm once, and prints the binary's path. Later runs reuse it
# until the pinned version (go.sum) changes. Nothing is downloaded but Go
# modules from the module proxy.
#   hack/chart/helm.sh            build if needed, print the path
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
mod=$repo/hack/tools/helm
out=$repo/_output/tools
bin=$out/helm
stamp=$out/helm.stamp

export GOWORK=off GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-buildvcs=false
version=$(cd "$mod" && go list -m -f '{{.Version}}' helm.sh/helm/v4)
key=$( { go version; sha256sum "$mod/go.mod" "$mod/go.sum"; } | sha256sum | cut -d' ' -f1)
if [[ -x $bin && -f $stamp && $(<"$stamp") == "$key" ]]; then
  echo "$bin"
  exit 0
fi
mkdir -p "$out"
echo "building helm $version into $bin (once; a few minutes cold)" >&2
start=$SECONDS
(cd "$mod" && go build -trimpath -ldflags "-s -w -X helm.sh/helm/v4/internal/version.version=$version" \
  -o "$bin.tmp" helm.sh/helm/v4/cmd/helm)
mv "$bin.tmp" "$bin"
echo "$key" >"$stamp"
echo "built helm $version in $((SECONDS - start))s" >&2
echo "$bin"
