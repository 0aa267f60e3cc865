# Linux image of the Diskplane plugin (controller and node modes).
#
# Stage 1 builds the static binary with `make build`, exactly as a developer
# does; stage 2 is a small Debian base with the tools the node plugin runs:
# mkfs/fsck/resize for ext4 and xfs, blkid/lsblk/losetup, and cryptsetup.
# Both bases are build arguments so an offline build can point them at
# locally assembled images (`make image` does, with buildah; see
# docs/install.md).
ARG BUILDER_IMAGE=golang:1.26-bookworm
ARG BASE_IMAGE=debian:bookworm-slim

FROM ${BUILDER_IMAGE} AS builder
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=v0.0.0-dev
ARG COMMIT=unknown
RUN make build VERSION=${VERSION} COMMIT=${COMMIT}

FROM ${BASE_IMAGE}
ARG VERSION=v0.0.0-dev
LABEL org.opencontainers.image.title="diskplane" \
      org.opencontainers.image.description="Diskplane CSI driver for Amazon EBS and EC2-compatible block storage" \
      org.opencontainers.image.source="https://github.com/diskplane/diskplane" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version="${VERSION}"
# xfsprogs pulls in ICU and Python only for xfs_scrub and xfs_scrub_all,
# which the driver never runs (it needs mkfs.xfs, xfs_growfs, xfs_io and
# xfs_repair, none of which links them): dropping them and the scrubbers
# takes 60 MB off the image.
RUN apt-get update \
 && apt-get install -y --no-install-recommends e2fsprogs xfsprogs util-linux mount cryptsetup-bin ca-certificates \
 && for p in python3 python3.11 python3-minimal python3.11-minimal libpython3-stdlib libpython3.11-stdlib \
      libpython3.11-minimal libsqlite3-0 media-types libreadline8 readline-common libicu72; do \
      dpkg --purge --force-depends "$p" || exit 1; done \
 && rm -f /usr/sbin/xfs_scrub /usr/sbin/xfs_scrub_all \
 && rm -rf /var/lib/apt/lists/* /var/cache/apt/* /var/log/* /usr/share/doc/* /usr/share/man/*
COPY --from=builder /src/_output/bin/diskplane /bin/diskplane
ENTRYPOINT ["/bin/diskplane"]
