# shellcheck shell=bash
# Shared by the scripts that take Debian packages from the mirror this
# machine's own apt uses (hack/image, hack/vm): finding that mirror, and a
# private apt for arm64 packages. Source it; it has no side effects.

# debian_apt_source SUITE prints the URI this machine's apt takes the Debian
# suite SUITE (bookworm, bookworm-security …) from, as its sources list it
# (one-line or deb822; APT_CONFIG is honoured), without a trailing slash; or
# nothing when no source names the suite. What is built then comes from the
# mirror the machine gets its own packages from, whatever network it is on,
# instead of an address written here.
debian_apt_source() {
  local targets
  # shellcheck disable=SC2016 # apt's format fields, not shell expansions
  targets=$(apt-get indextargets --no-release-info --format '$(TARGET_OF) $(RELEASE) $(REPO_URI)' \
    'Identifier: Packages' 2>/dev/null) || true
  awk -v suite="$1" '$1 == "deb" && $2 == suite { sub(/\/+$/, "", $3); print $3; exit }' <<<"$targets"
}

# debian_apt_archive prints the URI of a source this machine's apt knows,
# from its downloaded Release file, to be Debian's main archive (Origin and
# Label "Debian"), whatever release the machine runs; or nothing.
debian_apt_archive() {
  local targets
  # shellcheck disable=SC2016 # apt's format fields, not shell expansions
  targets=$(apt-get indextargets --format '$(TARGET_OF)|$(ORIGIN)|$(LABEL)|$(REPO_URI)' \
    'Identifier: Packages' 2>/dev/null) || true
  awk -F'|' '$1 == "deb" && $2 == "Debian" && $3 == "Debian" { sub(/\/+$/, "", $4); print $4; exit }' <<<"$targets"
}

# debian_arm64_apt DIR MIRROR [SECURITY_MIRROR] points apt (APT_CONFIG,
# exported) at a private state in DIR for arm64 alone: its own
# configuration, sources (bookworm and bookworm-updates from MIRROR,
# bookworm-security from SECURITY_MIRROR when given), lists, cache and an
# empty dpkg status, so that apt resolves every dependency as on an empty
# arm64 system and the host's apt is left as it was. This machine's Acquire
# settings (proxies, validity checks) carry over. The lists and downloaded
# packages stay in DIR for the next build.
debian_arm64_apt() {
  local apt=$1 mirror=$2 security=${3:-} keyring=/usr/share/keyrings/debian-archive-keyring.gpg
  mkdir -p "$apt"/etc/apt.conf.d "$apt"/etc/preferences.d "$apt"/etc/sources.list.d \
    "$apt"/state/lists/partial "$apt"/cache/archives/partial
  : >"$apt/status"
  {
    apt-config dump | grep -E '^Acquire::' || true
    cat <<CFG
Dir::Etc "$apt/etc";
Dir::Etc::parts "$apt/etc/apt.conf.d";
Dir::State "$apt/state";
Dir::State::status "$apt/status";
Dir::Cache "$apt/cache";
Dir::Log "$apt";
APT::Architecture "arm64";
APT::Architectures { "arm64"; };
APT::Install-Recommends "false";
APT::Sandbox::User "root";
Acquire::Languages "none";
Debug::NoLocking "true";
CFG
  } >"$apt/apt.conf"
  {
    echo "deb [signed-by=$keyring] $mirror bookworm main"
    echo "deb [signed-by=$keyring] $mirror bookworm-updates main"
    [[ -z $security ]] || echo "deb [signed-by=$keyring] $security bookworm-security main"
  } >"$apt/etc/sources.list"
  export APT_CONFIG=$apt/apt.conf
}

# debian_cached_deb DIR NAME VERSION prints the package file apt downloaded
# into DIR (an apt cache's archives) for NAME at VERSION (arm64 or all), or
# nothing when there is none.
debian_cached_deb() {
  local f
  for f in "$1/${2}_${3//:/%3a}_"{arm64,all}.deb; do
    [[ -f $f ]] && echo "$f"
  done
  return 0
}

# debian_prune_cache DIR KEPT... removes the package files in DIR (an apt
# cache's archives) that are not among KEPT, so that superseded versions do
# not pile up.
debian_prune_cache() {
  local dir=$1 f
  shift
  for f in "$dir"/*.deb; do
    [[ " $* " == *" $f "* ]] || rm -f "$f"
  done
}

# debian_merge_usr ROOT moves ROOT's /bin, /sbin and /lib under /usr and
# links them there, as bookworm's merged /usr has them (packages unpacked
# with dpkg-deb -x keep their own paths).
debian_merge_usr() {
  local root=$1 d
  for d in bin sbin lib; do
    if [[ -d $root/$d && ! -L $root/$d ]]; then
      mkdir -p "$root/usr/$d"
      cp -a "$root/$d/." "$root/usr/$d/"
      rm -rf "${root:?}/$d"
    fi
    ln -s "usr/$d" "$root/$d"
  done
}
