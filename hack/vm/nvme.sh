#!/usr/bin/env bash
# The production node path, end to end, with NVMe devices: the node VM plays
# the EC2 emulator's instance. On the host: the emulator (--guest-agent: it
# attaches volumes through the VM's guest agent) and Diskplane's controller.
# In the VM: the guest agent (ec2-emulator guest-agent), which exposes each
# attached volume as an NVMe namespace with EBS's serial number and model,
# udev, which makes the by-id links a Nitro instance has, and Diskplane's
# node plugin as --mode=node runs it in production (no --emulator-loop-
# devices). Then, inside the VM: csi-sanity once per access type
# (tests/sanity, TestSanityNVMe) and the NVMe scenarios (tests/vm). Exits
# with the VM's status; logs in _output/vm/nvme/logs (_output/vm-arm64/nvme/logs
# with VM_ARCH=arm64).
# The host's emulator answers STS and KMS too, the controller signs its KMS
# calls with the access key the workload-identity scenario declares, and
# the node plugin reaches both with the pods' credentials.
#   hack/vm/nvme.sh
#   VM_NVME_RUN=regexp   run only these tests (-test.run), e.g. TestNVMeNamesSwap
#   VM_PROFILE=ci        csi-sanity on mount with LUKS2 only: the plain mount
#                        and block runs (full, the default) add nothing that
#                        the LUKS2 run (the same NVMe device through every
#                        spec), the NVMe scenarios (discovery) and the host's
#                        csi-sanity on loop devices (every spec, both access
#                        types) do not also cover, and cost 5 minutes
#   VM_SANITY="RUN ..."  the csi-sanity runs on NVMe, any of mount, block and
#                        luks2 (mount with nodeEncryption: luks2), instead of
#                        the profile's; none: the NVMe scenarios alone
#   VM_ARCH=arm64        the arm64 node VM (lib.sh): the plugin, the guest
#                        agent and the tests in the VM are built for arm64,
#                        the emulator and the controller on the host for it
#   VM_PORT_BASE=port    the first of the host ports this run takes (default
#                        18700: 18700-18703 and 18710), so that runs with
#                        VM_DIRs of their own can boot VMs at once
#   VM_KUBECONFIG=path   a kubeconfig of the local cluster (hack/vm/identity.sh):
#                        the VM reaches its API server for real tokens, the
#                        node plugin (named vm-identity.csi.diskplane.io)
#                        reads its CSIDriver there, and the tests that need
#                        it must run (no skip)
set -euo pipefail
# Two CPUs: the node plugin, the guest agent, csi-sanity and the kernel's
# work run at once (software emulation runs each CPU on a host core).
export VM_CPUS=${VM_CPUS:-2}
# shellcheck source=hack/vm/lib.sh
source "$(dirname "$0")/lib.sh"

[[ $(id -u) -eq 0 ]] || vm_die "the VM tests need root"
out=$VM_DIR/nvme
guest_out=$vm_guest_dir/nvme
# The programs the VM runs: the host's own on amd64, built for arm64 apart
# on arm64.
guest_bin=bin
[[ $VM_ARCH == amd64 ]] || guest_bin=bin-$VM_ARCH
# Host ports: the emulator's EC2, IMDS and admin listeners, the controller,
# and the forward to the guest agent's port 8703. The VM reaches the host's
# loopback at 10.0.2.2.
port_base=${VM_PORT_BASE:-18700}
[[ $port_base =~ ^[0-9]+$ ]] && ((port_base >= 1024 && port_base <= 65000)) || vm_die "VM_PORT_BASE=$port_base: want a port from 1024 to 65000"
ec2_port=$port_base imds_port=$((port_base + 1)) admin_port=$((port_base + 2)) agent_port=$((port_base + 3))
ctrl_port=$((port_base + 10))
for p in $ec2_port $imds_port $admin_port $agent_port $ctrl_port; do
  ! (exec 3<>/dev/tcp/127.0.0.1/$p) 2>/dev/null || vm_die "port $p is in use"
done

"$vm_here/build.sh" >/dev/null
rm -rf "$out" && mkdir -p "$out/bin" "$out/logs" "$out/emulator"
started=$SECONDS
vm_log "building the plugin, the emulator and the tests (static)"
(
  cd "$vm_repo"
  CGO_ENABLED=0 go build -o "$out/bin/" ./cmd/diskplane ./cmd/ec2-emulator
  [[ $guest_bin == bin ]] || CGO_ENABLED=0 GOARCH=$VM_ARCH go build -o "$out/$guest_bin/" ./cmd/diskplane ./cmd/ec2-emulator
  CGO_ENABLED=0 GOARCH=$VM_ARCH go test -c -tags vm -o "$out/sanity.test" ./tests/sanity
  CGO_ENABLED=0 GOARCH=$VM_ARCH go test -c -tags vm -o "$out/vm.test" ./tests/vm
)

run_filter=${VM_NVME_RUN:-}
vm_driver_name=vm-identity.csi.diskplane.io
case ${VM_PROFILE:=full} in
  full) sanity_runs="mount block luks2" ;;
  ci) sanity_runs="luks2" ;;
  *) vm_die "VM_PROFILE must be full or ci, not $VM_PROFILE" ;;
esac
sanity_runs=${VM_SANITY:-$sanity_runs}
sanity_access="" sanity_luks2=false
for r in $sanity_runs; do
  case $r in
    mount | block) sanity_access+=" $r" ;;
    luks2) sanity_luks2=true ;;
    none) ;;
    *) vm_die "VM_SANITY names mount, block, luks2 or none, not $r" ;;
  esac
done
cluster_env=""
node_cluster_args=""
if [[ -n ${VM_KUBECONFIG:-} ]]; then
  # The VM reaches the host's API server at 10.0.2.2; its certificate names
  # localhost. The copy holds the cluster's admin credentials: mode 0600,
  # removed at exit, and the cluster is a throwaway one.
  install -m 0600 "$VM_KUBECONFIG" "$out/kubeconfig"
  cluster=$(kubectl --kubeconfig="$out/kubeconfig" config view -o jsonpath='{.contexts[0].context.cluster}')
  kubectl --kubeconfig="$out/kubeconfig" config set-cluster "$cluster" --server=https://10.0.2.2:6443 --tls-server-name=localhost >/dev/null
  cluster_env="export DISKPLANE_VM_KUBECONFIG=$guest_out/kubeconfig DISKPLANE_REQUIRE_CLUSTER_TESTS=1 DISKPLANE_VM_DRIVER_NAME=$vm_driver_name"
  # The node plugin reads where the kubelet puts tokens from a CSIDriver of
  # its own name, which the test creates and changes (the cluster's
  # Diskplane, if any, keeps its own).
  node_cluster_args="--kubeconfig=$guest_out/kubeconfig --driver-name=$vm_driver_name"
fi
cat >"$out/guest.sh" <<EOF
# written by hack/vm/nvme.sh; runs in the node VM
B=/bin/busybox
logs=$guest_out/logs
\$B mkdir -p /run/diskplane
$guest_out/$guest_bin/ec2-emulator guest-agent --listen=0.0.0.0:8703 -v=2 >\$logs/guest-agent.log 2>&1 &
export AWS_EC2_METADATA_SERVICE_ENDPOINT=http://10.0.2.2:$imds_port AWS_REGION=us-east-1
# STS and KMS are the host's emulator; the node has no credentials of its own.
export AWS_ENDPOINT_URL_STS=http://10.0.2.2:$ec2_port AWS_ENDPOINT_URL_KMS=http://10.0.2.2:$ec2_port
# LUKS2 headers at Argon2id's least fixed cost (no benchmark when formatting, a cheap
# open): csi-sanity formats dozens, and the derivation is not what it tests.
$guest_out/$guest_bin/diskplane --mode=node --endpoint=unix:///run/diskplane/csi.sock --http-endpoint=127.0.0.1:3302 --luks-pbkdf-iterations=4 --luks-pbkdf-memory=8192 $node_cluster_args -v=4 >\$logs/node.log 2>&1 &
node=\$!
export DISKPLANE_VM_NODE=unix:///run/diskplane/csi.sock DISKPLANE_VM_CONTROLLER=10.0.2.2:$ctrl_port
export DISKPLANE_VM_ADMIN=http://10.0.2.2:$admin_port DISKPLANE_VM_NODE_METRICS=http://127.0.0.1:3302/metrics DISKPLANE_REQUIRE_ROOT_TESTS=1
$cluster_env
# The emulator serves once it has reached the agent (the controller runs
# already).
i=0
until \$B wget -q -O /dev/null http://10.0.2.2:$admin_port/healthz 2>/dev/null; do
  i=\$((i + 1)); [ \$i -lt 600 ] || { echo "vm: the emulator never answered"; exit 1; }
  \$B sleep 0.2
done
# The node plugin serves once its socket is there and its health check
# passes; the first test asks it at once (the plugin needs a moment more
# than the guest agent, longer with the cluster's API server to reach).
i=0
until [ -S /run/diskplane/csi.sock ] && \$B wget -q -O /dev/null http://127.0.0.1:3302/healthz 2>/dev/null; do
  \$B kill -0 \$node 2>/dev/null || { echo "vm: the node plugin exited: \$(\$B tail -5 \$logs/node.log)"; exit 1; }
  i=\$((i + 1)); [ \$i -lt 600 ] || { echo "vm: the node plugin never served"; exit 1; }
  \$B sleep 0.2
done
failed=0
run() {
  name=\$1; shift
  echo "=== VM \$name"
  start=\$(\$B cut -d. -f1 /proc/uptime)
  if "\$@"; then
    echo "=== VM ok   \$name \$(( \$(\$B cut -d. -f1 /proc/uptime) - start )) s"
  else
    echo "=== VM FAIL \$name \$(( \$(\$B cut -d. -f1 /proc/uptime) - start )) s"; failed=1
  fi
}
cd /host/tests/sanity
if [ -z "$run_filter" ] || echo TestSanityNVMe | \$B grep -qE "$run_filter"; then
  for access in $sanity_access; do
    DISKPLANE_VM_ACCESS=\$access run "csi-sanity (\$access) on NVMe" $guest_out/sanity.test -test.run '^TestSanityNVMe\$' -test.v -test.timeout=40m
  done
  ! $sanity_luks2 || DISKPLANE_VM_ACCESS=mount DISKPLANE_VM_ENCRYPTED=1 run "csi-sanity (mount, LUKS2) on NVMe" $guest_out/sanity.test -test.run '^TestSanityNVMe\$' -test.v -test.timeout=40m
fi
cd /host/tests/vm
run "NVMe scenarios" $guest_out/vm.test -test.v -test.timeout=20m ${run_filter:+-test.run '$run_filter'}
kill \$node 2>/dev/null
exit \$failed
EOF

pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -f "$out/kubeconfig"
}
trap cleanup EXIT

# The controller needs nothing of the emulator to start; it runs before the
# tests in the VM do. It serves all three csi-sanity runs, which create and
# delete volumes of the same names ("sanity") minutes apart; a name's
# volume made again within --visibility-timeout of the last request for it
# is refused as "try again later" (EC2's reads may not show the first one
# yet), so the bound is the emulator's: its reads are consistent.
env AWS_ENDPOINT_URL_EC2=http://127.0.0.1:$ec2_port AWS_ENDPOINT_URL_KMS=http://127.0.0.1:$ec2_port AWS_REGION=us-east-1 \
  AWS_ACCESS_KEY_ID=vm AWS_SECRET_ACCESS_KEY=vm \
  "$out/bin/diskplane" --mode=controller --endpoint=tcp://127.0.0.1:$ctrl_port --visibility-timeout=2s -v=4 >"$out/logs/controller.log" 2>&1 &
pids+=($!)
vm_log "booting the VM"
"$vm_here/run.sh" --forward "$agent_port:8703" "$vm_repo" "${out#"$vm_repo"/}/guest.sh" >"$out/logs/vm-console.log" 2>&1 &
vm_pid=$!
"$out/bin/ec2-emulator" --listen=127.0.0.1:$ec2_port --imds-listen=127.0.0.1:$imds_port --admin-listen=127.0.0.1:$admin_port \
  --data-dir="$out/emulator" --guest-agent=http://127.0.0.1:$agent_port --guest-data-dir="$guest_out/emulator" \
  --zones=us-east-1a=use1-az1 --instance=id=i-0123456789abcdef0,type=m5.large,zone=us-east-1a,local \
  --volume-create-latency=200ms --attach-latency=200ms --detach-latency=200ms --volume-delete-latency=200ms \
  --snapshot-latency=200ms --modify-latency=200ms --optimize-latency=200ms -v=2 >"$out/logs/emulator.log" 2>&1 &
pids+=($!)
# The emulator serves once it has reached the guest agent in the booted VM.
for _ in $(seq 600); do
  curl -fsS "http://127.0.0.1:$admin_port/healthz" >/dev/null 2>&1 && break
  kill -0 "$vm_pid" 2>/dev/null || break
  sleep 0.2
done
curl -fsS "http://127.0.0.1:$admin_port/healthz" >/dev/null 2>&1 || { tail -20 "$out/logs/emulator.log" >&2; vm_die "the emulator did not start"; }
vm_log "emulator ready after $((SECONDS - started)) s"

rc=0
wait "$vm_pid" || rc=$?
grep -E '^=== VM|^--- FAIL|^    --- FAIL|access: [0-9]+ specs' "$out/logs/vm-console.log" || true
if ((rc != 0)); then
  # What the failing tests said (t.Fatal and t.Error lines), the last ones.
  grep -E '^ +[A-Za-z0-9_]+_test\.go:[0-9]+: |^vm: ' "$out/logs/vm-console.log" | tail -40 || true
  vm_log "failed: the VM's console is $out/logs/vm-console.log; the plugin's logs are in $out/logs"
fi
vm_log "NVMe tests: exit status $rc after $((SECONDS - started)) s"
exit "$rc"
