#!/usr/bin/env bash
# Builds a pinned tool from its own Go module, hack/tools/NAME, into
# _output/tools/NAME once, and prints the binary's path. Later runs reuse it
# until the Go version, its flags (hack/lib/goflags.sh) or the module's pins
# (go.mod, go.sum) change; so do other checkouts: _output/tools links into
# this machine's cache (hack/lib/cache.sh). One build of a tool at a time.
# Nothing is downloaded but Go modules from the module proxy. Each tool has
# its own module so that its dependencies stay out of Diskplane's go.mod.
#   hack/tools/build.sh NAME PACKAGE [go build flags...]
set -euo pipefail
name=$1 pkg=$2
shift 2
repo=$(cd "$(dirname "$0")/../.." && pwd)
mod=$repo/hack/tools/$name
# shellcheck source=hack/lib/cache.sh
source "$repo/hack/lib/cache.sh"
out=$repo/_output/tools
cache_link "$out" tools
bin=$out/$name
stamp=$out/$name.stamp
exec {lock}>"$out/$name.lock"
flock "$lock"

# shellcheck source=hack/lib/goflags.sh
source "$repo/hack/lib/goflags.sh"
key=$( { go version; echo "$GOFLAGS"; sha256sum "$mod/go.mod" "$mod/go.sum"; } | sha256sum | cut -d' ' -f1)
if [[ -x $bin && -f $stamp && $(<"$stamp") == "$key" ]]; then
  echo "$bin"
  exit 0
fi
echo "building $name into $bin (once)" >&2
start=$SECONDS
(cd "$mod" && go build "$@" -o "$bin.tmp" "$pkg")
mv "$bin.tmp" "$bin"
echo "$key" >"$stamp"
echo "built $name in $((SECONDS - start))s" >&2
echo "$bin"
