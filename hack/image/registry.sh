#!/usr/bin/env bash
# Builds the pinned in-memory OCI registry (hack/tools/registry, its own Go
# module: go-containerregistry's cmd/registry) into _output/tools/registry
# once, and prints the binary's path. The image push test pushes to it.
set -euo pipefail
exec "$(dirname "$0")/../tools/build.sh" registry github.com/google/go-containerregistry/cmd/registry
