#!/usr/bin/env bash
# Regenerates the pinned tool modules under hack/local-cluster/tools/ from the
# versions below. Run it only to change a version, then commit the resulting
# go.mod, go.sum and *.go files; build.sh never resolves versions itself.
#
# Why nested modules: the module proxy here is a partial mirror, and most of
# these tools cannot be fetched with `go install tool@version` because their
# own go.mod files carry replace directives. Each tool module below requires
# the upstream module, copies its requires and replaces (turning local-path
# replaces into the published module at the same version), and blank-imports
# the commands, so `go build` inside the module produces the upstream binary.
#
# Needs: go, jq. Network: the Go module proxy only.
set -euo pipefail

# Kubernetes: the newest release whose staging modules are all on the proxy and
# whose kubelet still runs with containerd 1.6 on cgroup v1 (see README.md).
KUBE_VERSION=v1.35.4
PROVISIONER_VERSION=v6.3.0
ATTACHER_VERSION=v4.13.0
RESIZER_VERSION=v2.3.0
SNAPSHOTTER_VERSION=v8.7.0

here=$(cd "$(dirname "$0")" && pwd)
tools="$here/tools"
base_path=github.com/diskplane/diskplane/hack/local-cluster/tools

# modfile MODULE@VERSION prints the path of that module's go.mod in the cache.
modfile() {
  (cd /tmp && GOFLAGS=-mod=mod go mod download -json "$1" | jq -r .GoMod)
}

# write_tools_go PKG... writes tools.go, which blank-imports the commands so
# that the module's go.sum covers everything `go build PKG` needs.
write_tools_go() {
  {
    echo "//go:build tools"
    echo
    echo "// Package tools pins the commands that build.sh compiles from this module."
    echo "package tools"
    echo
    echo "import ("
    printf '\t_ "%s"\n' "$@" | sort
    echo ")"
  } >tools.go
  gofmt -l tools.go | grep -q . && gofmt -w tools.go
  return 0
}

# kube_module writes tools/k8s: Kubernetes itself, with every ./staging
# replace of its go.mod pointed at the published k8s.io module of the same
# release (v0.MINOR.PATCH). Its hand-written e2e_test.go (Kubernetes' External
# Storage suite as a test binary) is kept as it is.
kube_module() {
  local dir="$tools/k8s" mf staging
  mf=$(modfile "k8s.io/kubernetes@$KUBE_VERSION")
  staging="v0.${KUBE_VERSION#v1.}"
  mkdir -p "$dir" && cd "$dir"
  rm -f go.mod go.sum tools.go
  {
    echo "module $base_path/k8s"
    echo
    echo "go $(go mod edit -json "$mf" | jq -r .Go)"
    echo
    echo "require k8s.io/kubernetes $KUBE_VERSION"
    echo
    echo "replace ("
    grep '=> ./staging/' "$mf" | awk -v v="$staging" '{ printf "\t%s => %s %s\n", $1, $1, v }'
    echo ")"
  } >go.mod
  write_tools_go \
    k8s.io/kubernetes/cmd/kube-apiserver \
    k8s.io/kubernetes/cmd/kube-controller-manager \
    k8s.io/kubernetes/cmd/kube-scheduler \
    k8s.io/kubernetes/cmd/kubelet \
    k8s.io/kubernetes/cmd/kube-proxy \
    k8s.io/kubernetes/cmd/kubectl \
    k8s.io/kubernetes/test/images/agnhost
  go mod tidy
}

# sidecar_module DIR MODULE VERSION PKG... writes tools/DIR, a module that
# requires MODULE@VERSION and carries over its requires and replaces.
sidecar_module() {
  local name=$1 mod=$2 ver=$3 dir mf
  shift 3
  dir="$tools/$name"
  mf=$(modfile "$mod@$ver")
  mkdir -p "$dir" && cd "$dir"
  rm -f go.mod go.sum tools.go
  go mod init "$base_path/$name" >/dev/null 2>&1
  go mod edit -go="$(go mod edit -json "$mf" | jq -r .Go)" -require="$mod@$ver"
  go mod edit -json "$mf" | jq -r '.Require[]? | "-require=\(.Path)@\(.Version)"' | xargs -r go mod edit
  go mod edit -json "$mf" | jq -r --arg v "$ver" '.Replace[]? |
    if (.New.Version // "") == "" then "-replace=\(.Old.Path)=\(.Old.Path)@\($v)"
    else "-replace=\(.Old.Path)=\(.New.Path)@\(.New.Version)" end' | xargs -r go mod edit
  write_tools_go "$@"
  go mod tidy
}

kube_module

# The provisioner needs a module of its own: v6.3.0 does not compile against the
# client-go v0.37 the other sidecars use (and v6.4.0 / v5.x need library
# versions this proxy does not have).
sidecar_module csi-provisioner github.com/kubernetes-csi/external-provisioner/v6 "$PROVISIONER_VERSION" \
  github.com/kubernetes-csi/external-provisioner/v6/cmd/csi-provisioner

# Attacher, resizer, snapshotter and snapshot-controller share one module (one
# compile of their common dependencies), based on the attacher's go.mod. The
# snapshotter's own go.mod points client/v8 at its in-repo copy (./client),
# which a dependency's replace cannot do, so require the published client/v8
# module of the same release, which is that same code.
sidecar_module csi-sidecars github.com/kubernetes-csi/external-attacher/v4 "$ATTACHER_VERSION" \
  github.com/kubernetes-csi/external-attacher/v4/cmd/csi-attacher \
  github.com/kubernetes-csi/external-resizer/v2/cmd/csi-resizer \
  github.com/kubernetes-csi/external-snapshotter/v8/cmd/csi-snapshotter \
  github.com/kubernetes-csi/external-snapshotter/v8/cmd/snapshot-controller
cd "$tools/csi-sidecars"
go mod edit \
  -require="github.com/kubernetes-csi/external-resizer/v2@$RESIZER_VERSION" \
  -require="github.com/kubernetes-csi/external-snapshotter/v8@$SNAPSHOTTER_VERSION" \
  -require="github.com/kubernetes-csi/external-snapshotter/client/v8@$SNAPSHOTTER_VERSION"
go mod tidy

echo "tool modules written under $tools"
