# Diskplane build, test and verification targets. Output goes to _output/
# (git-ignored). Every target that needs Debian packages installs them first.

GO          ?= go
OUTPUT      := _output
BIN         := $(OUTPUT)/bin
PKG         := github.com/diskplane/diskplane
VERSION     ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo v0.0.0-dev)
COMMIT      ?= $(shell git rev-parse --verify -q HEAD 2>/dev/null || echo unknown)
# The commit's time, not the clock's: the same commit builds the same
# binaries, which go build then leaves alone (a running plugin's binary is
# not replaced under it by the next target that builds).
BUILD_DATE  ?= $(shell TZ=UTC git log -1 --format=%cd --date=format-local:%Y-%m-%dT%H:%M:%SZ 2>/dev/null || date -u +%Y-%m-%dT%H:%M:%SZ)
LDFLAGS     := -s -w \
	-X $(PKG)/pkg/version.version=$(VERSION) \
	-X $(PKG)/pkg/version.commit=$(COMMIT) \
	-X $(PKG)/pkg/version.buildDate=$(BUILD_DATE)
# Static binaries: the images carry no libc for them.
export CGO_ENABLED := 0
# -trimpath for every go command, not only the release builds: packages
# compiled for a vet, a test and a build then share one entry in Go's build
# cache, and a checkout in another directory (CI's clean clones) finds them
# there (without it, the directory is part of every package's cache key).
# No DWARF debug information either: compiling without it takes about 14%
# less CPU (measured on client-go), and stack traces, profiles and the
# release binaries (linked with -s -w) never read it. To step through a
# test in a debugger, run go test with GOFLAGS=-trimpath. The pinned tools
# and the local cluster build with the same flags (hack/lib/goflags.sh), so
# the packages they share with Diskplane are compiled once.
GOFLAGS += -trimpath -gcflags=all=-dwarf=false
export GOFLAGS
TEST_FLAGS  ?= -count=1 -timeout=45m

.PHONY: all build build-linux-arm64 build-windows test test-windows fuzz verify clean deps chaos

all: build

deps:
	@hack/install-deps.sh

## build: the plugin and the emulator for this machine, into _output/bin
build:
	@mkdir -p $(BIN)
	$(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/ ./cmd/...

## build-linux-arm64: the plugin for arm64 Linux nodes (static, cross-compiled), into _output/bin/linux-arm64, for the arm64 image
build-linux-arm64:
	@mkdir -p $(BIN)/linux-arm64
	GOOS=linux GOARCH=arm64 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/linux-arm64/ ./cmd/diskplane

## build-windows: the plugin for Windows nodes and the csi-proxy emulator, into _output/bin/windows-amd64
build-windows:
	@mkdir -p $(BIN)/windows-amd64
	GOOS=windows GOARCH=amd64 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/windows-amd64/ ./cmd/diskplane ./cmd/csi-proxy-emulator

## test-windows: the Windows node under Wine: its packages built for Windows and run (HostProcess scenario included), then the real diskplane.exe against the csi-proxy emulator as csi-proxy v1.1.3 and v1.3.0 (scenario, start-up and version checks, /healthz, csi-sanity's node specs)
WINDOWS_PKGS := ./pkg/csiproxy/... ./pkg/mounter/... ./pkg/emulator/winhost/... ./pkg/driver/node/... ./pkg/filetree/... ./tests/windows/... ./tests/crash/...
WINDOWS_TEST_FLAGS ?= -count=1 -timeout=10m
test-windows:
	@hack/wine/setup.sh >/dev/null
	PATH=$(CURDIR)/hack/wine:$$PATH GOOS=windows GOARCH=amd64 $(GO) test $(WINDOWS_TEST_FLAGS) $(WINDOWS_PKGS)
	@# pkg/driver's other tests serve unix sockets, which Wine 8.0 does not have.
	PATH=$(CURDIR)/hack/wine:$$PATH GOOS=windows GOARCH=amd64 $(GO) test $(WINDOWS_TEST_FLAGS) -run 'Windows$$' ./pkg/driver
	CGO_ENABLED=1 $(GO) test -race -tags wine $(WINDOWS_TEST_FLAGS) ./tests/windows/...
	@# csi-sanity's node specs again, with csi-proxy as the oldest release supported (Ginkgo runs once a process).
	DISKPLANE_CSI_PROXY_VERSION=v1.1.3 CGO_ENABLED=1 $(GO) test -race -tags wine $(WINDOWS_TEST_FLAGS) -run '^TestSanity$$' ./tests/windows/...

## test: every unit, integration and sanity test (as root: real loop devices and mounts)
test: deps
	CGO_ENABLED=1 $(GO) test -race $(TEST_FLAGS) ./...

## test-fresh-debian: as root: make test in a minimal Debian 12 root (mmdebstrap) holding only Go, make and git,
## as README promises a newcomer (hack/fresh-debian/test.sh; FRESH_DEBIAN_TARGET=<target> runs another)
.PHONY: test-fresh-debian
test-fresh-debian:
	hack/fresh-debian/test.sh

## test-vm: as root, in a VM with Debian's stock kernel (hack/vm): the node-side root tests (pkg/mounter,
## pkg/driver/node, pkg/emulator/disks) with nothing skipped (device-mapper, the NVMe target, online ext4
## growth), then csi-sanity and the NVMe scenarios with the VM as the emulator's instance (NVMe devices);
## VM_PROFILE=ci runs in the VM only the root tests this machine's kernel cannot (VM_KERNEL_ONLY), one package
## at a time on one vCPU (beside CI's other lanes one vCPU ran the same tests faster than two, with half the
## host CPU), and leaves out csi-sanity's plain mount and block runs on NVMe (hack/vm/README.md)
VM_PROFILE ?= full
.PHONY: test-vm
test-vm:
	$(if $(filter ci,$(VM_PROFILE)),VM_KERNEL_ONLY=1 VM_CPUS=1 VM_TEST_JOBS=1 VM_TEST_TIMEOUT=60m) hack/vm/test.sh
	VM_PROFILE=$(VM_PROFILE) hack/vm/nvme.sh

## test-arm64: the tests of the plugin's pure packages (all cmd/diskplane links but pkg/mounter and pkg/driver/node) built for
## linux/arm64 and run under qemu-user (Debian's qemu-user-static, registered with binfmt_misc; root); ARM64_PROFILE=ci
## only those whose own code meets the platform (syscall, unsafe, x/sys/unix, encoding/binary, runtime)
ARM64_PROFILE ?= full
.PHONY: test-arm64
test-arm64:
	ARM64_PROFILE=$(ARM64_PROFILE) hack/arm64/test.sh

## test-vm-arm64: as root, the node on arm64 (Graviton): test-vm's node-side root tests in a VM booting Debian's arm64
## kernel under qemu-system-aarch64 (software emulation), then csi-sanity's mount specs on NVMe and the NVMe scenarios
## with that VM as the emulator's instance; VM_PROFILE=ci runs only the NVMe scenarios (hack/vm/README.md)
.PHONY: test-vm-arm64
test-vm-arm64:
	hack/install-deps.sh vm-arm64
	$(if $(filter ci,$(VM_PROFILE)),@echo "VM_PROFILE=ci: the root tests' packages and csi-sanity are left out on arm64",VM_ARCH=arm64 hack/vm/test.sh)
	VM_ARCH=arm64 VM_SANITY=$(if $(filter ci,$(VM_PROFILE)),none,mount) hack/vm/nvme.sh

## test-moto: Diskplane against moto, the independent AWS mock (moto_server on PATH): the cloud layer's integration
## tests, csi-sanity's controller specs and a lifecycle load through the diskplane binary, and workload identity's
## STS and KMS calls (tests/moto/README.md); MOTO_PROFILE=ci runs 10 lifecycles instead of 30
MOTO_PROFILE ?= full
.PHONY: test-moto
test-moto: build
	DISKPLANE_TEST_EC2=moto CGO_ENABLED=1 $(GO) test -race -count=1 -timeout=10m ./pkg/cloud
	DISKPLANE_BINARY=$(CURDIR)/$(BIN)/diskplane MOTO_LIFECYCLES=$(if $(filter ci,$(MOTO_PROFILE)),10,30) \
		CGO_ENABLED=1 $(GO) test -race -tags moto -count=1 -timeout=20m -v ./tests/moto/...

## test-crash: as root: the crash-point harness's full profile (every interruption and recovery at every step of
## every node operation; tests/crash): Linux in the node VM, Windows under Wine; tables in _output/crash
.PHONY: test-crash
test-crash:
	@mkdir -p _output/crash
	VM_TEST_RUN=TestCrashConsistency VM_TEST_TIMEOUT=5h VM_TIMEOUT=18000 \
		VM_TEST_ENV="DISKPLANE_CRASH_PROFILE=full DISKPLANE_CRASH_OPERATIONS=all DISKPLANE_CRASH_REPORT=/host/_output/crash" \
		hack/vm/test.sh ./tests/crash
	@hack/wine/setup.sh >/dev/null
	PATH=$(CURDIR)/hack/wine:$$PATH DISKPLANE_CRASH_PROFILE=full DISKPLANE_CRASH_REPORT=$(CURDIR)/_output/crash \
		GOOS=windows GOARCH=amd64 $(GO) test -count=1 -timeout=30m -run TestWindowsCrashConsistency ./tests/crash

## test-vm-identity: as root: workload identity with real tokens of the local
## cluster (brought up when it is not running) in the node VM: hack/vm/identity.sh. Take the cluster down after
.PHONY: test-vm-identity
test-vm-identity:
	hack/vm/identity.sh

## bench: Diskplane against the physical floor (BENCH_PROFILE=full|ci; UPSTREAM_EBS_CSI_DRIVER=<binary> adds
## the upstream driver's figures): one table of figures, floors and ratios; raw data in _output/bench
.PHONY: bench
bench: build
	hack/bench/run.sh

## fuzz: run each fuzz target briefly (FUZZTIME each); the seed corpora also run in `make test`
FUZZTIME ?= 20s
FUZZ_TARGETS := ./pkg/driver/parameters:FuzzVolumeParameters ./pkg/driver/parameters:FuzzTagTemplate
fuzz:
	@for t in $(FUZZ_TARGETS); do \
		pkg=$${t%%:*}; name=$${t##*:}; \
		echo "fuzzing $$name in $$pkg for $(FUZZTIME)"; \
		$(GO) test -run '^$$' -fuzz "^$$name\$$" -fuzztime $(FUZZTIME) -fuzzminimizetime 2s $$pkg || exit 1; \
	done

## verify: formatting, vet and staticcheck (for linux and windows). The suites behind build tags are
## checked in the same run as the rest (VERIFY_TAGS): one run analyses the dependencies they share once.
VERIFY_TAGS := e2e,e2e_install,e2e_multinode,vm,bench,chaos,moto,release,wine
verify:
	@out=$$(gofmt -l $$(git ls-files '*.go') $$(git ls-files --others --exclude-standard '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt needed on:"; echo "$$out"; exit 1; fi
	$(GO) vet -tags $(VERIFY_TAGS) ./...
	GOOS=windows $(GO) vet ./...
	$(GO) tool staticcheck -tags $(VERIFY_TAGS) ./...
	@# The Windows node's code, checked as Windows builds it (a host binary
	@# of the tool: `go tool` would build it for Windows).
	@$(GO) build -o $(OUTPUT)/verify/staticcheck honnef.co/go/tools/cmd/staticcheck
	GOOS=windows $(OUTPUT)/verify/staticcheck ./...

## chaos: volume lifecycles through the real controller, SIGKILLed at random, under EC2's faults, then an audit of the emulator (tests/chaos; CHAOS_PROFILE=full, or ci for CI's reduced run)
CHAOS_PROFILE ?= full
chaos: build
	DISKPLANE_BINARY=$(CURDIR)/$(BIN)/diskplane CHAOS_PROFILE=$(CHAOS_PROFILE) CHAOS_LOG_DIR=$(CURDIR)/$(OUTPUT)/chaos \
		CGO_ENABLED=1 $(GO) test -race -tags chaos -count=1 -timeout=45m -v ./tests/chaos/...

clean:
	rm -rf $(OUTPUT)

## clean-cache: remove what is built once for every checkout of this machine (hack/lib/cache.sh): the local
## cluster's Kubernetes and sidecars, the node VM's boot files, the pinned tools
.PHONY: clean-cache
clean-cache:
	rm -rf "$${DISKPLANE_CACHE_DIR:-$${XDG_CACHE_HOME:-$$HOME/.cache}/diskplane}"

# --- Helm chart, kustomize base and images (charts/, deploy/, hack/chart, hack/image)

.PHONY: helm kustomize verify-kustomize chart-readme test-chart chart-package image image-windows push image-sidecars image-import release test-release

## helm: the pinned Helm (hack/tools/helm), built once into _output/tools/helm
helm:
	@hack/chart/helm.sh >/dev/null

## kustomize: render the kustomize base deploy/kubernetes from the chart
kustomize:
	hack/chart/kustomize.sh

## verify-kustomize: fail when deploy/kubernetes, or the chart README's values table, is out of date with the chart (CI)
verify-kustomize:
	hack/chart/kustomize.sh --check
	$(GO) run ./hack/chart/readme -check

## chart-readme: write the values table of charts/diskplane/README.md from values.yaml's comments
chart-readme:
	$(GO) run ./hack/chart/readme

## chart-package: the Helm chart as a versioned archive, _output/charts/diskplane-<version>.tgz (CHART_VERSION, APP_VERSION override Chart.yaml's)
chart-package:
	CHART_VERSION='$(CHART_VERSION)' APP_VERSION='$(APP_VERSION)' hack/chart/package.sh

## test-chart: the chart's tests (lint, rendering, every option, schema) with the pinned Helm
test-chart:
	HELM=$$(hack/chart/helm.sh) DISKPLANE_REQUIRE_CHART_TESTS=1 CGO_ENABLED=1 $(GO) test -race $(TEST_FLAGS) ./tests/chart/...

## image: the Linux images (buildah, local Debian bases): linux/amd64 from the Dockerfile into _output/images/diskplane.tar,
## linux/arm64 assembled from Debian's arm64 packages without emulation, and their OCI image index in _output/images/diskplane-index.oci.tar
image:
	hack/image/build.sh

## image-windows: the HostProcess Windows image (windows/amd64, no base image pulled) as an OCI archive in _output/images/windows,
## and (as root) Dockerfile.windows's csi-proxy stage built with buildah on stand-in bases; both checked by tests/images
image-windows:
	hack/image/windows.sh

## push: build the images and push their index (linux/amd64, linux/arm64) to IMAGE=<registry>/<name>:<tag> with buildah; prints its digest (root; log in with buildah login first)
push:
	IMAGE='$(IMAGE)' hack/image/push.sh

## release: the release artifacts of VERSION=vX.Y.Z in _output/release/VERSION: the chart with the image pinned by digest, the image index
## (OCI archive), the kustomize bundle, an SBOM, the released CHANGELOG (in the tree too with RELEASE_CHANGELOG=1), SHA256SUMS (root)
release:
	VERSION='$(VERSION)' hack/release/release.sh

## test-release: check the artifacts of the latest make release (RELEASE_DIR=_output/release/<version> another's; tests/release)
RELEASE_DIR ?= $(OUTPUT)/release/latest
test-release:
	HELM=$$(hack/chart/helm.sh) DISKPLANE_RELEASE_DIR=$(abspath $(RELEASE_DIR)) DISKPLANE_REQUIRE_RELEASE_TESTS=1 \
		$(GO) test -tags release -count=1 -v ./tests/release/...

## image-sidecars: CSI sidecar images for the local cluster, from hack/local-cluster's binaries
image-sidecars:
	hack/image/sidecars.sh

## image-import: import _output/images/*.tar into the local cluster's containerd
image-import:
	hack/image/import.sh

# --- A local Kubernetes cluster with Diskplane and the EC2 emulator (hack/e2e,
# hack/local-cluster): the demo and the end-to-end suites. They need root.

.PHONY: demo demo-down e2e e2e-external

## demo: build what is missing, bring up a local cluster and the EC2 emulator, helm install Diskplane from images built here, run examples/dynamic-provisioning
demo: build
	hack/e2e/demo.sh

## demo-down: stop the demo / e2e cluster, Diskplane and the emulator; leave the machine as it was
demo-down:
	hack/e2e/down.sh

E2E_FLAGS ?= -count=1 -timeout=40m -parallel=4 -v
## e2e: Diskplane's end-to-end tests (tests/e2e) in the local cluster, brought up first when needed;
## E2E_RUN=<regexp> runs only those (CI: the tests whose steps differ when the driver runs as host processes)
e2e: build
	hack/e2e/up.sh
	CGO_ENABLED=1 $(GO) test -race -tags e2e $(E2E_FLAGS) $(if $(E2E_RUN),-run '$(E2E_RUN)') ./tests/e2e/...

## e2e-external: Kubernetes' External Storage suite against Diskplane (E2E_EXTERNAL=full|ci, default full)
E2E_EXTERNAL ?= full
e2e-external: build
	hack/e2e/up.sh external
	hack/e2e/external.sh $(E2E_EXTERNAL)

# --- Diskplane installed into the local cluster the way a user installs it
# (hack/e2e/incluster.sh): the images built here, the EC2 emulator the only
# host process. Both need root; make demo-down tears everything down.

.PHONY: e2e-helm e2e-kustomize e2e-multinode

## e2e-helm: helm install into the local cluster (node with the startup taint), then tests/e2e, helm upgrade under a mounted volume, leader failover, claims under chaos (E2E_CHAOS=full|ci), helm uninstall leaving nothing;
## E2E_CHART=_output/release/diskplane.tgz installs make release's chart, its image pinned by digest, instead of charts/diskplane
e2e-helm: build
	E2E_FLAGS='$(E2E_FLAGS)' E2E_RUN='$(E2E_RUN)' E2E_SKIP='$(E2E_SKIP)' E2E_CHART='$(E2E_CHART)' hack/e2e/incluster.sh helm

## e2e-multinode: a multi-node local cluster (NODES=3 workers in two zones, each an emulator instance that sees only its own volumes),
## Diskplane installed with Helm, then the scenarios of tests/e2e/multinode (E2E_MULTINODE_PROFILE=full|ci; E2E_MULTINODE_RUN=<regexp>)
e2e-multinode: build
	E2E_FLAGS='$(E2E_FLAGS)' hack/e2e/multinode.sh

## e2e-kustomize: the same with kubectl apply -k hack/e2e/kustomize and kubectl delete -k (no upgrade step);
## E2E_RUN=<regexp> runs only those tests of tests/e2e (CI: one per sidecar the manifests wire up);
## E2E_SKIP='failover drain' skips those steps (CI: the Helm run proved them on the same rendered objects)
e2e-kustomize: build
	E2E_FLAGS='$(E2E_FLAGS)' E2E_RUN='$(E2E_RUN)' E2E_SKIP='$(E2E_SKIP)' hack/e2e/incluster.sh kustomize
