#!/usr/bin/env bash
# shellcheck disable=SC2317 # run_step calls the build functions by name
# Builds what the local cluster runs, from the pinned tool modules in tools/
# and from Debian packages, into $LOCAL_CLUSTER_DIR (default
# _output/local-cluster): bin/, images/, crds/; the first two link into this
# machine's cache (hack/lib/cache.sh). Nothing is pulled from a registry, ever.
#
#   hack/local-cluster/build.sh                    everything
#   hack/local-cluster/build.sh cluster sidecars   only what a cluster with a CSI driver needs
#   hack/local-cluster/build.sh e2e                Kubernetes' e2e.test, agnhost and its image
#
# Steps:
#   cluster   kube-apiserver, kube-controller-manager, kube-scheduler, kubelet,
#             kube-proxy, kubectl; the static pause binary; the busybox and pause
#             images; the VolumeSnapshot CRDs
#   sidecars  csi-provisioner, csi-attacher, csi-resizer, csi-snapshotter,
#             snapshot-controller
#   e2e       e2e.test (External Storage suite), agnhost and the agnhost image
#
# Each step is skipped when its outputs exist and its cache key (Go version,
# the module's go.mod/go.sum/sources, the build flags) is unchanged, so a
# version bump in tools/ rebuilds exactly what it affects. The Go build cache
# (go env GOCACHE) makes even a rebuild of unchanged sources take seconds.
# Needs: go, gcc + libc6-dev (static pause), busybox-static, jq, sha256sum
# (hack/install-deps.sh cluster installs them).
set -euo pipefail
source "$(dirname "$0")/lib.sh"

source "$lc_here/../lib/goflags.sh"
tools=$lc_here/tools

steps=("$@")
((${#steps[@]})) || steps=(cluster sidecars e2e)
for s in "${steps[@]}"; do
  case $s in cluster | sidecars | e2e) ;; *) lc_die "unknown step $s (want cluster, sidecars or e2e)" ;; esac
done
# What this builds (15 minutes of two cores from cold Go caches) is kept in
# this machine's cache (hack/lib/cache.sh), shared by its checkouts: bin/,
# images/ and stamps/ link there, so a new clone finds it built (crds/, a
# copy of a few files that kubectl apply -f does not read through a link,
# is copied again). One build at a time writes it.
source "$lc_here/../lib/cache.sh"
for d in bin images stamps; do cache_link "$LOCAL_CLUSTER_DIR/$d" "local-cluster/$d"; done
mkdir -p "$lc_crds"
exec {cache_lock}>"$diskplane_cache_dir/local-cluster/.lock"
flock "$cache_lock"

# module_version DIR MODULE prints the version DIR's go.mod requires of MODULE.
module_version() {
  (cd "$1" && go mod edit -json | jq -r --arg m "$2" '.Require[] | select(.Path == $m) | .Version')
}

# module_dir DIR MODULE prints where MODULE (as DIR's go.mod pins it) is in the
# module cache, downloading it first if needed.
module_dir() {
  (cd "$1" && go mod download "$2" && go list -m -f '{{.Dir}}' "$2")
}

# cache_key FILE... [-- STRING...] hashes the Go version and flags, the
# files' contents and the strings: everything that decides what a step
# produces.
cache_key() {
  {
    go version
    echo "$GOFLAGS"
    while (($#)) && [[ $1 != -- ]]; do
      sha256sum "$1"
      shift
    done
    [[ ${1:-} == -- ]] && shift
    printf '%s\n' "$@"
  } | sha256sum | cut -d' ' -f1
}

# run_step NAME KEY OUTPUT... -- COMMAND... runs COMMAND unless stamps/NAME
# already holds KEY and every OUTPUT exists; records KEY only after COMMAND
# succeeded, so an interrupted build is redone next time.
run_step() {
  local name=$1 key=$2 outputs=() start=$SECONDS
  shift 2
  while [[ $1 != -- ]]; do
    outputs+=("$1")
    shift
  done
  shift
  if [[ -f $lc_stamps/$name && $(<"$lc_stamps/$name") == "$key" ]]; then
    local missing=0 o
    for o in "${outputs[@]}"; do [[ -e $o ]] || missing=1; done
    if ((missing == 0)); then
      lc_log "$name: up to date"
      return 0
    fi
  fi
  rm -f "$lc_stamps/$name"
  lc_log "$name: building"
  "$@"
  echo "$key" >"$lc_stamps/$name"
  lc_log "$name: built in $((SECONDS - start))s"
}

kube_dir=$tools/k8s
kube_version=$(module_version "$kube_dir" k8s.io/kubernetes)
kube_minor=${kube_version#v1.}
kube_minor=${kube_minor%%.*}
# Without these the binaries report v0.0.0-master, and the kubelet's node
# version and the e2e framework's server version checks see nonsense.
kube_ldflags="-s -w"
for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  kube_ldflags+=" -X $p.gitVersion=$kube_version -X $p.gitMajor=1 -X $p.gitMinor=$kube_minor -X $p.gitTreeState=clean"
done
# kubectl too: the one on a machine (if any) may be too old for this release.
kube_cmds=(kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy kubectl)

build_kube() {
  (cd "$kube_dir" && go build -ldflags "$kube_ldflags" -o "$lc_bin/" \
    "${kube_cmds[@]/#/k8s.io/kubernetes/cmd/}")
}

build_pause() {
  local src
  src=$(module_dir "$kube_dir" k8s.io/kubernetes)/build/pause/linux/pause.c
  gcc -Os -static -DVERSION="$kube_version-diskplane-local" -o "$lc_bin/pause" "$src"
}

# e2e_image NAME prints the reference Kubernetes' e2e framework uses for its
# image NAME (BusyBox, Agnhost, Pause, ...), read from the pinned release's
# test/utils/image/manifest.go, so a version bump retags the local images.
e2e_image() {
  local manifest registry_var registry name tag
  manifest=$(module_dir "$kube_dir" k8s.io/kubernetes)/test/utils/image/manifest.go
  read -r registry_var name tag < <(sed -nE \
    "s/^[[:space:]]*configs\[$1\] = Config\{list\.([A-Za-z0-9]+), \"([^\"]+)\", \"([^\"]+)\"\}.*/\1 \2 \3/p" "$manifest")
  [[ -n ${tag:-} ]] || lc_die "image $1 not found in $manifest"
  registry=$(sed -nE "s/^[[:space:]]*$registry_var:[[:space:]]*\"([^\"]+)\",.*/\1/p" "$manifest" | head -1)
  [[ -n $registry ]] || lc_die "registry $registry_var not found in $manifest"
  echo "$registry/$name:$tag"
}

# write_image ARCHIVE ROOTFS ENTRYPOINT_JSON CMD_JSON TAG... writes a
# docker-archive (manifest.json + config + one layer) that
# `ctr images import` accepts, with every TAG naming the same image. Packed
# deterministically: unchanged inputs give the same digest and archive bytes.
write_image() {
  local archive=$1 rootfs=$2 entrypoint=$3 cmd=$4 work layer_sha config_sha tags
  shift 4
  work=$(mktemp -d "$lc_images/.work.XXXXXX")
  tar --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 -C "$rootfs" -cf "$work/layer.tar" .
  layer_sha=$(sha256sum "$work/layer.tar" | cut -d' ' -f1)
  jq -cn --argjson ep "$entrypoint" --argjson cmd "$cmd" --arg diff "sha256:$layer_sha" '{
      architecture: "amd64", os: "linux",
      config: {Env: ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"],
               Entrypoint: $ep, Cmd: $cmd, WorkingDir: "/"},
      rootfs: {type: "layers", diff_ids: [$diff]}}' >"$work/config.json"
  config_sha=$(sha256sum "$work/config.json" | cut -d' ' -f1)
  mv "$work/config.json" "$work/$config_sha.json"
  mkdir "$work/$layer_sha"
  mv "$work/layer.tar" "$work/$layer_sha/layer.tar"
  tags=$(printf '%s\n' "$@" | jq -R . | jq -cs .)
  jq -cn --arg cfg "$config_sha.json" --argjson tags "$tags" --arg layer "$layer_sha/layer.tar" \
    '[{Config: $cfg, RepoTags: $tags, Layers: [$layer]}]' >"$work/manifest.json"
  tar --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 -C "$work" -cf "$archive.tmp" \
    manifest.json "$config_sha.json" "$layer_sha"
  mv "$archive.tmp" "$archive"
  rm -rf "$work"
}

# busybox_rootfs DIR fills DIR with busybox-static and its applet links, plus
# the few files containers expect (passwd, group, a world-writable /tmp).
busybox_rootfs() {
  local dir=$1 applet
  mkdir -p "$dir"/{bin,dev,etc,proc,root,sys,tmp,var}
  chmod 1777 "$dir/tmp"
  cp /usr/bin/busybox "$dir/bin/busybox"
  for applet in $(/usr/bin/busybox --list); do
    [[ $applet == busybox ]] || ln -sf busybox "$dir/bin/$applet"
  done
  printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n' >"$dir/etc/passwd"
  printf 'root:x:0:\nnobody:x:65534:\n' >"$dir/etc/group"
}

# Busybox stands in for every e2e image whose pods the storage suites only run
# sh, ls, cat, dd, mount or nsenter in; extra names come from BUSYBOX_TAGS.
busybox_tags() {
  echo localhost/busybox:local
  echo docker.io/library/busybox:latest
  local n
  for n in BusyBox Nginx NginxNew JessieDnsutils; do e2e_image "$n"; done
  local extra=()
  read -r -a extra <<<"${BUSYBOX_TAGS:-}"
  ((${#extra[@]} == 0)) || printf '%s\n' "${extra[@]}"
}

build_busybox_image() {
  local rootfs
  rootfs=$(mktemp -d "$lc_images/.rootfs.XXXXXX")
  busybox_rootfs "$rootfs"
  mapfile -t tags < <(busybox_tags)
  write_image "$lc_images/busybox.tar" "$rootfs" null '["sh"]' "${tags[@]}"
  rm -rf "$rootfs"
}

build_pause_image() {
  local rootfs
  rootfs=$(mktemp -d "$lc_images/.rootfs.XXXXXX")
  cp "$lc_bin/pause" "$rootfs/pause"
  write_image "$lc_images/pause.tar" "$rootfs" '["/pause"]' null localhost/pause:local "$(e2e_image Pause)"
  rm -rf "$rootfs"
}

# agnhost on a busybox rootfs: the e2e HostExec pods need its sh and nsenter.
build_agnhost_image() {
  local rootfs
  rootfs=$(mktemp -d "$lc_images/.rootfs.XXXXXX")
  busybox_rootfs "$rootfs"
  cp "$lc_bin/agnhost" "$rootfs/agnhost"
  write_image "$lc_images/agnhost.tar" "$rootfs" '["/agnhost"]' '["pause"]' \
    "$(e2e_image Agnhost)" "$(e2e_image AgnhostPrev)"
  rm -rf "$rootfs"
}

snapshot_version=$(module_version "$tools/csi-sidecars" github.com/kubernetes-csi/external-snapshotter/client/v8)

copy_snapshot_crds() {
  local dir
  dir=$(module_dir "$tools/csi-sidecars" github.com/kubernetes-csi/external-snapshotter/client/v8)/config/crd
  rm -f "$lc_crds"/*.yaml
  cp "$dir"/snapshot.storage.k8s.io_*.yaml "$lc_crds/"
  chmod 644 "$lc_crds"/*.yaml
}

kube_key_files=("$kube_dir/go.mod" "$kube_dir/go.sum" "$kube_dir/tools.go")

step_cluster() {
  run_step kube "$(cache_key "${kube_key_files[@]}" -- "$kube_ldflags" "${kube_cmds[@]}")" \
    "${kube_cmds[@]/#/$lc_bin/}" -- build_kube
  run_step pause "$(cache_key "$kube_dir/go.sum" -- "$(gcc --version | head -1)")" \
    "$lc_bin/pause" -- build_pause
  run_step pause-image "$(cache_key "$lc_bin/pause" "$kube_dir/go.sum" -- pause-image-2)" \
    "$lc_images/pause.tar" -- build_pause_image
  run_step busybox-image "$(cache_key /usr/bin/busybox "$kube_dir/go.sum" -- busybox-image-2 "${BUSYBOX_TAGS:-}")" \
    "$lc_images/busybox.tar" -- build_busybox_image
  run_step snapshot-crds "$(cache_key -- "$snapshot_version")" \
    "$lc_crds/snapshot.storage.k8s.io_volumesnapshots.yaml" -- copy_snapshot_crds
}

provisioner_dir=$tools/csi-provisioner
provisioner_version=$(module_version "$provisioner_dir" github.com/kubernetes-csi/external-provisioner/v6)
sidecars_dir=$tools/csi-sidecars
attacher_version=$(module_version "$sidecars_dir" github.com/kubernetes-csi/external-attacher/v4)
resizer_version=$(module_version "$sidecars_dir" github.com/kubernetes-csi/external-resizer/v2)

# Each sidecar reports its own release as its version.
build_provisioner() {
  (cd "$provisioner_dir" && go build -ldflags "-s -w -X main.version=$provisioner_version" -o "$lc_bin/" \
    github.com/kubernetes-csi/external-provisioner/v6/cmd/csi-provisioner)
}

build_sidecars() {
  cd "$sidecars_dir"
  go build -ldflags "-s -w -X main.version=$attacher_version" -o "$lc_bin/" \
    github.com/kubernetes-csi/external-attacher/v4/cmd/csi-attacher
  go build -ldflags "-s -w -X main.version=$resizer_version" -o "$lc_bin/" \
    github.com/kubernetes-csi/external-resizer/v2/cmd/csi-resizer
  go build -ldflags "-s -w -X main.version=$snapshot_version" -o "$lc_bin/" \
    github.com/kubernetes-csi/external-snapshotter/v8/cmd/csi-snapshotter \
    github.com/kubernetes-csi/external-snapshotter/v8/cmd/snapshot-controller
  cd - >/dev/null
}

build_e2e_test() {
  (cd "$kube_dir" && go test -c -ldflags "$kube_ldflags" -o "$lc_bin/e2e.test" .)
}

build_agnhost() {
  (cd "$kube_dir" && go build -ldflags "-s -w" -o "$lc_bin/" k8s.io/kubernetes/test/images/agnhost)
}

step_sidecars() {
  run_step csi-provisioner "$(cache_key "$provisioner_dir"/{go.mod,go.sum,tools.go} -- "$provisioner_version")" \
    "$lc_bin/csi-provisioner" -- build_provisioner
  run_step csi-sidecars "$(cache_key "$sidecars_dir"/{go.mod,go.sum,tools.go} -- "$attacher_version $resizer_version $snapshot_version")" \
    "$lc_bin/csi-attacher" "$lc_bin/csi-resizer" "$lc_bin/csi-snapshotter" "$lc_bin/snapshot-controller" -- build_sidecars
}

step_e2e() {
  run_step e2e.test "$(cache_key "${kube_key_files[@]}" "$kube_dir/e2e_test.go" -- "$kube_ldflags")" \
    "$lc_bin/e2e.test" -- build_e2e_test
  run_step agnhost "$(cache_key "${kube_key_files[@]}")" "$lc_bin/agnhost" -- build_agnhost
  run_step agnhost-image "$(cache_key "$lc_bin/agnhost" /usr/bin/busybox "$kube_dir/go.sum" -- agnhost-image-2)" \
    "$lc_images/agnhost.tar" -- build_agnhost_image
}

# The steps run from one function call, so that bash has read the whole file
# before the long build starts: editing this file meanwhile cannot derail it.
main() {
  local start=$SECONDS s
  for s in "$@"; do
    case $s in
      cluster) step_cluster ;;
      sidecars) step_sidecars ;;
      e2e) step_e2e ;;
    esac
  done
  lc_log "build done in $((SECONDS - start))s (Kubernetes $kube_version) into $LOCAL_CLUSTER_DIR"
}
main "${steps[@]}"
exit
