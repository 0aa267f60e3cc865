#!/usr/bin/env bash
# Builds a pinned tool from its own Go module, hack/tools/NAME, into
# _output/tools/NAME once, and prints the binary's path. Later runs reuse it
# until the Go version or the module's pins (go.mod, go.sum) change. Nothing
# is downloaded but Go modules from the module proxy. Each tool has its own
# module so that its dependencies stay out of Diskplane's go.mod.
#   hack/tools/build.sh NAME PACKAGE [go build flags...]
set -euo pipefail
name=$1 pkg=$2
shift 2
repo=$(cd "$(dirname "$0")/../.." && pwd)
mod=$repo/hack/tools/$name
out=$repo/_output/tools
bin=$out/$name
stamp=$out/$name.stamp

export GOWORK=off GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-buildvcs=false
key=$( { go version; sha256sum "$mod/go.mod" "$mod/go.sum"; } | sha256sum | cut -d' ' -f1)
if [[ -x $bin && -f $stamp && $(<"$stamp") == "$key" ]]; then
  echo "$bin"
  exit 0
fi
mkdir -p "$out"
echo "building $name into $bin (once)" >&2
start=$SECONDS
(cd "$mod" && go build -trimpath "$@" -o "$bin.tmp" "$pkg")
mv "$bin.tmp" "$bin"
echo "$key" >"$stamp"
echo "built $name in $((SECONDS - start))s" >&2
echo "$bin"
