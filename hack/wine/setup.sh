#!/usr/bin/env bash
# Prepares Wine to run Diskplane's Windows builds and tests on this Debian
# machine: installs wine and mingw-w64 (hack/install-deps.sh windows), builds
# the bcryptprimitives.dll Go's runtime needs and Wine 8.0 lacks, and makes a
# Wine prefix with it in _output/wine/prefix (WINEPREFIX overrides). Safe to
# run again: a prefix that already has the current DLL is left as it is.
# Prints the prefix.
set -euo pipefail
cd "$(dirname "$0")/../.."

hack/install-deps.sh windows >&2
out=_output/wine
prefix="${WINEPREFIX:-$PWD/$out/prefix}"
mkdir -p "$out"

dll="$out/bcryptprimitives.dll"
if [[ ! -f "$dll" || hack/wine/bcryptprimitives.c -nt "$dll" ]]; then
  x86_64-w64-mingw32-gcc -O2 -s -shared -Wl,--kill-at -o "$dll" hack/wine/bcryptprimitives.c -ladvapi32
fi

installed="$prefix/drive_c/windows/system32/bcryptprimitives.dll"
if [[ ! -f "$installed" ]]; then
  echo "Creating the Wine prefix $prefix" >&2
  WINEPREFIX="$prefix" WINEDEBUG=-all WINEDLLOVERRIDES="mscoree,mshtml=" wine wineboot --init >/dev/null 2>&1
  WINEPREFIX="$prefix" wineserver --wait
fi
if ! cmp -s "$dll" "$installed"; then
  cp "$dll" "$installed"
fi
echo "$prefix"
