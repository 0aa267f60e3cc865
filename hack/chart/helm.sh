#!/usr/bin/env bash
# Builds the pinned Helm (hack/tools/helm, its own Go module) into
# _output/tools/helm once, and prints the binary's path. Later runs reuse it
# until the pinned version (go.sum) changes. Nothing is downloaded but Go
# modules from the module proxy.
#   hack/chart/helm.sh            build if needed, print the path
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
version=$(cd "$repo/hack/tools/helm" && GOWORK=off GOTOOLCHAIN=local go list -m -f '{{.Version}}' helm.sh/helm/v4)
exec "$repo/hack/tools/build.sh" helm helm.sh/helm/v4/cmd/helm \
  -ldflags "-s -w -X helm.sh/helm/v4/internal/version.version=$version"
