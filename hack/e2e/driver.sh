#!/usr/bin/env bash
# Starts, stops or restarts Diskplane and its CSI sidecars in the local
# cluster, configured for the EC2 emulator exactly as hack/e2e/up.sh does.
# The end-to-end tests use "restart" after killing the plugin, the way a
# controller pod's containers come back after a crash.
#
#   hack/e2e/driver.sh up | down | restart
#
# Settings: see hack/e2e/lib.sh. Needs root.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
lc_require_root "hack/e2e/driver.sh"

case ${1:-} in
  up) e2e_require_binaries && e2e_driver_up ;;
  down) e2e_driver_down ;;
  restart) e2e_require_binaries && e2e_driver_down && e2e_driver_up ;;
  *) lc_die "usage: hack/e2e/driver.sh up | down | restart" ;;
esac
