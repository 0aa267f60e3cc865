# shellcheck shell=bash
# Where this machine keeps what Diskplane's scripts build from pinned
# sources and that no checkout should build again: DISKPLANE_CACHE_DIR,
# default ${XDG_CACHE_HOME:-$HOME/.cache}/diskplane. Every entry is checked
# against a key of its inputs before it is used, as Go's build cache is, so
# checkouts of different commits share it safely; `make clean-cache` removes
# it. Source it; it has no side effects.
diskplane_cache_dir=${DISKPLANE_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/diskplane}

# cache_link DIR ENTRY makes DIR (a build output directory inside a checkout)
# a link to ENTRY below the cache, unless DIR is a directory of its own
# already (a checkout that built before the cache existed keeps its copy).
cache_link() {
  local dir=$1 entry=$diskplane_cache_dir/$2
  [[ -d $dir && ! -L $dir ]] && return 0
  mkdir -p "$entry" "$(dirname "$dir")"
  ln -sfn "$entry" "$dir"
}
