# shellcheck shell=bash
# The Go settings of every build from pinned sources (the tools, the local
# cluster's Kubernetes and sidecars): static, the local toolchain, no VCS
# stamp (the module cache holds no repository), and the compile flags of the
# Makefile's GOFLAGS (-trimpath, no DWARF), so that a package such a build
# shares with Diskplane (client-go, gRPC, ...) is one entry in Go's build
# cache, compiled once. Source it; it only exports.
export GOWORK=off GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS="-buildvcs=false -trimpath -gcflags=all=-dwarf=false"
