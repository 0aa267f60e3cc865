#!/usr/bin/env bash
# Tears down what hack/e2e/up.sh (make demo, make e2e) started and leaves the
# machine as it was: hack/local-cluster/down.sh deletes the pods while the
# driver still runs (so volumes are unmounted and detached the normal way),
# stops the driver, the emulator and the cluster, and restores the machine;
# then the emulator's remaining loop devices and links are released and its
# data (the EC2 volumes and snapshots of this run) deleted. Safe to run twice.
# Needs root.
set -uo pipefail
source "$(dirname "$0")/lib.sh"
lc_require_root "hack/e2e/down.sh"
start=$SECONDS

"$lc_here/down.sh"
# down.sh stops every recorded process; a stopped emulator leaves the loop
# devices of volumes still attached (e.g. after the plugin died under a pod).
if lc_pid_alive emulator; then
  lc_stop emulator
fi
if [[ -d $e2e_emulator_dir ]]; then
  if [[ -x $e2e_emulator ]]; then
    "$e2e_emulator" release-devices --data-dir="$e2e_emulator_dir" --device-link-dir="$e2e_links" >/dev/null ||
      lc_log "ec2-emulator release-devices failed; hack/local-cluster/down.sh detached the loop devices below $LOCAL_CLUSTER_DIR"
  fi
  rm -rf "$e2e_emulator_dir"
  lc_log "deleted the emulator's data"
fi
# A link dir outside the emulator's (hack/e2e/incluster.sh puts it below
# /dev) goes too once release-devices emptied it; a link left in it means a
# device is still attached, and it stays for a look.
if [[ $e2e_links != "$e2e_emulator_dir"/* && -d $e2e_links ]]; then
  if rmdir "$e2e_links" 2>/dev/null; then
    lc_log "removed $e2e_links"
  else
    lc_log "$e2e_links is not empty; left it"
  fi
fi
lc_log "demo/e2e environment down in $((SECONDS - start))s"
