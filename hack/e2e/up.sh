#!/usr/bin/env bash
# Brings up everything Diskplane's end-to-end runs need, reusing whatever
# already runs: the Debian packages, the local cluster's binaries (built once
# into _output/local-cluster), the cluster, the EC2 emulator playing the
# node's instance, and Diskplane with its CSI sidecars as host processes.
# Expects make build's _output/bin/{diskplane,ec2-emulator} (the Makefile
# targets build them first). Needs root. hack/e2e/down.sh undoes it.
#
#   hack/e2e/up.sh            cluster, emulator, driver
#   hack/e2e/up.sh external   also e2e.test, agnhost and its image (make e2e-external)
#
# Settings: see hack/e2e/lib.sh.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
lc_require_root "hack/e2e/up.sh"
start=$SECONDS

steps=(cluster sidecars)
case ${1:-} in
  "") ;;
  external) steps+=(e2e) ;;
  *) lc_die "usage: hack/e2e/up.sh [external]" ;;
esac

e2e_require_binaries
"$lc_repo/hack/install-deps.sh" cluster
lc_log "building what the local cluster runs, unless built already (the first time from source: about 15 minutes on two cores)"
"$lc_here/build.sh" "${steps[@]}"
e2e_cluster_up
e2e_require_not_installed
e2e_emulator_up
e2e_driver_up
lc_log "cluster, ec2-emulator and Diskplane up in $((SECONDS - start))s"
