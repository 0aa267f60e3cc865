# Linux image of the Diskplane plugin (controller and node modes).
#
# Stage 1 builds the static binary with `make build`, exactly as a developer
# does; stage 2 is a small Debian base with the tools the node plugin runs:
# mkfs/fsck/resize for ext4 and xfs, blkid/lsblk/losetup, and cryptsetup.
# Both bases are build arguments so an offline build can point them at
# locally assembled images (see `make image`).
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
RUN apt-get update \
 && apt-get install -y --no-install-recommends e2fsprogs xfsprogs util-linux mount cryptsetup-bin ca-certificates \
 && rm -rf /var/lib/apt/lists/* /var/cache/apt/* /usr/share/doc/* /usr/share/man/*
COPY --from=builder /src/_output/bin/diskplane /bin/diskplane
ENTRYPOINT ["/bin/diskplane"]
