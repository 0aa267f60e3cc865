#!/usr/bin/env bash
# Renders the kustomize base deploy/kubernetes from the Helm chart with its
# default values, in namespace kube-system: one file per chart template,
# plus kustomization.yaml. Users run `kubectl apply -k deploy/kubernetes`.
# It also renders the Windows node as two kustomize components, one per
# flavour, which an overlay adds to the base (docs/windows.md):
# deploy/windows (csi-proxy's pipes) and deploy/windows-hostprocess.
#   hack/chart/kustomize.sh           (re)write deploy/kubernetes and
#                                     deploy/windows*
#   hack/chart/kustomize.sh --check   fail when they differ from what the
#                                     chart renders (CI)
#   hack/chart/kustomize.sh --bundle FILE
#                                     write the base as one multi-document
#                                     YAML file instead (make release's
#                                     bundle, from CHART_DIR)
# HELM names the Helm binary to use; by default hack/chart/helm.sh builds the
# pinned one. CHART_DIR the chart (default: charts/diskplane).
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
dest=$repo/deploy/kubernetes
namespace=kube-system
helm=${HELM:-$("$repo/hack/chart/helm.sh")}
chart=${CHART_DIR:-$repo/charts/diskplane}

check=0 bundle=
case ${1:-} in
  --check) check=1 ;;
  --bundle) bundle=${2:?usage: $0 --bundle FILE} ;;
  "") ;;
  *) echo "usage: $0 [--check | --bundle FILE]" >&2; exit 2 ;;
esac

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# stream ARGS... renders the chart with ARGS as kustomize applies it: the
# chart's labels name Helm as the manager, and its EC2 calls say helm in
# their user agent; kustomize does both.
stream() {
  "$helm" template diskplane "$chart" --namespace "$namespace" \
    --set controller.userAgentExtra=kustomize "$@" |
    sed -e '/^ *helm\.sh\/chart: /d' -e 's|^\( *app\.kubernetes\.io/managed-by: \)Helm$|\1kustomize|'
}

if [[ -n $bundle ]]; then
  {
    echo "# The Diskplane base (kubectl apply -f), rendered from the chart $(sed -nE 's/^version: *//p' "$chart/Chart.yaml")"
    echo "# by hack/chart/kustomize.sh --bundle: the chart's default values, namespace $namespace."
    stream
  } >"$bundle.tmp"
  mv "$bundle.tmp" "$bundle"
  echo "$bundle"
  exit 0
fi

# render DIR ARGS... renders the chart with ARGS into DIR, one file per
# template, and lists the files in DIR/.order.
render() {
  local dir=$1
  shift
  mkdir -p "$dir"
  stream "$@" >"$dir.yaml"
  # Split the stream by "# Source: diskplane/templates/NAME.yaml" into NAME.yaml.
  awk -v out="$dir" '
    /^---$/ { doc = ""; next }
    /^# Source: diskplane\/templates\// {
      file = $3; sub(/^diskplane\/templates\//, "", file)
      path = out "/" file
      if (!(path in seen)) {
        seen[path] = 1
        order[++n] = file
        print "# Rendered from charts/diskplane by `make kustomize`; do not edit." > path
      }
      print "---" > path
      next
    }
    { if (path != "") print > path }
    END { for (i = 1; i <= n; i++) print order[i] > (out "/.order") }
  ' "$dir.yaml"
  rm "$dir.yaml"
}

# kustomization DIR KIND HEADER... writes DIR/kustomization.yaml listing the
# rendered files, with the HEADER lines as comments.
kustomization() {
  local dir=$1 kind=$2
  shift 2
  {
    printf '# %s\n' "$@"
    echo "# Rendered from charts/diskplane by \`make kustomize\`; do not edit."
    if [[ $kind == Component ]]; then
      echo "apiVersion: kustomize.config.k8s.io/v1alpha1"
    else
      echo "apiVersion: kustomize.config.k8s.io/v1beta1"
    fi
    echo "kind: $kind"
    echo "resources:"
    sort "$dir/.order" | sed 's/^/  - /'
  } >"$dir/kustomization.yaml"
  rm "$dir/.order"
}

out=$work/kubernetes
render "$out"
kustomization "$out" Kustomization \
  "The Diskplane base: the chart's default values, namespace $namespace." \
  "Overlays change images, values and the namespace (the node's admission" \
  "policy names the node ServiceAccount as system:serviceaccount:$namespace:diskplane-node)."

windows=(templates/node-windows-daemonset.yaml templates/node-windows-pipe-policy.yaml)
for flavour in csi-proxy hostProcess; do
  dir=$work/windows
  [[ $flavour == hostProcess ]] && dir=$work/windows-hostprocess
  render "$dir" --set node.windows.enabled=true --set node.windows.mode=$flavour \
    "${windows[@]/#/--show-only=}"
  kustomization "$dir" Component \
    "The Diskplane node plugin on Windows nodes ($flavour mode) and the admission" \
    "policies for csi-proxy's pipes, as a component of an overlay of deploy/kubernetes:" \
    "  resources: [<path>/deploy/kubernetes]" \
    "  components: [<path>/deploy/$(basename "$dir")]" \
    "The policies allow csi-proxy's pipes to pods in $namespace and of its diskplane-node account only."
done

dests=("$dest" "$repo/deploy/windows" "$repo/deploy/windows-hostprocess")
outs=("$out" "$work/windows" "$work/windows-hostprocess")
if ((check)); then
  stale=0
  for i in "${!dests[@]}"; do
    if ! diff -ru "${dests[$i]}" "${outs[$i]}" >"$work/diff"; then
      cat "$work/diff"
      stale=1
    fi
  done
  if ((stale)); then
    echo "deploy/ is out of date with charts/diskplane: run make kustomize and commit the result" >&2
    exit 1
  fi
  echo "deploy/ is up to date"
  exit 0
fi
for i in "${!dests[@]}"; do
  rm -rf "${dests[$i]}"
  mkdir -p "$(dirname "${dests[$i]}")"
  cp -r "${outs[$i]}" "${dests[$i]}"
  echo "rendered $(find "${dests[$i]}" -type f | wc -l) files into ${dests[$i]#"$repo"/}"
done
