#!/usr/bin/env bash
# Renders the kustomize base deploy/kubernetes from the Helm chart with its
# default values, in namespace kube-system: one file per chart template,
# plus kustomization.yaml. Users run `kubectl apply -k deploy/kubernetes`.
#   hack/chart/kustomize.sh           (re)write deploy/kubernetes
#   hack/chart/kustomize.sh --check   fail when deploy/kubernetes differs from
#                                     what the chart renders (CI)
# HELM names the Helm binary to use; by default hack/chart/helm.sh builds the
# pinned one.
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
dest=$repo/deploy/kubernetes
namespace=kube-system
helm=${HELM:-$("$repo/hack/chart/helm.sh")}

check=0
case ${1:-} in
  --check) check=1 ;;
  "") ;;
  *) echo "usage: $0 [--check]" >&2; exit 2 ;;
esac

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
out=$work/kubernetes
mkdir -p "$out"

# The chart's labels name Helm as the manager, and its EC2 calls say helm in
# their user agent; in the base, kustomize does both.
"$helm" template diskplane "$repo/charts/diskplane" --namespace "$namespace" \
  --set controller.userAgentExtra=kustomize |
  sed -e '/^ *helm\.sh\/chart: /d' -e 's|^\( *app\.kubernetes\.io/managed-by: \)Helm$|\1kustomize|' \
  >"$work/rendered.yaml"

# Split the stream by "# Source: diskplane/templates/NAME.yaml" into NAME.yaml.
awk -v out="$out" '
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
' "$work/rendered.yaml"

{
  echo "# The Diskplane base: the chart's default values, namespace $namespace."
  echo "# Rendered from charts/diskplane by \`make kustomize\`; do not edit."
  echo "# Overlays change images, values and the namespace (the node's admission"
  echo "# policy names the node ServiceAccount as system:serviceaccount:$namespace:diskplane-node)."
  echo "apiVersion: kustomize.config.k8s.io/v1beta1"
  echo "kind: Kustomization"
  echo "resources:"
  sort "$out/.order" | sed 's/^/  - /'
} >"$out/kustomization.yaml"
rm "$out/.order"

if ((check)); then
  if ! diff -ru "$dest" "$out" >"$work/diff"; then
    cat "$work/diff"
    echo "deploy/kubernetes is out of date with charts/diskplane: run make kustomize and commit the result" >&2
    exit 1
  fi
  echo "deploy/kubernetes is up to date"
  exit 0
fi
rm -rf "$dest"
mkdir -p "$(dirname "$dest")"
cp -r "$out" "$dest"
echo "rendered $(find "$dest" -type f | wc -l) files into deploy/kubernetes"
