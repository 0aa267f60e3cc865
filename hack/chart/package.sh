#!/usr/bin/env bash
# Packages the Helm chart charts/diskplane, with the pinned Helm, into a
# versioned archive a user installs from or uploads to a chart repository
# (helm push to an OCI registry, a static chart index):
#   make chart-package          _output/charts/diskplane-<version>.tgz
#
# Environment:
#   CHART_VERSION  the chart's version (default: Chart.yaml's version)
#   APP_VERSION    the Diskplane release it installs by default; the image tag
#                  defaults to v<APP_VERSION> (default: Chart.yaml's appVersion)
#   OUTPUT_DIR     where the archive goes (default: _output/charts)
#   CHART_DIR      the chart to package (default: charts/diskplane; make
#                  release packages a copy whose values pin the image)
#   HELM           the Helm binary (default: hack/chart/helm.sh builds it)
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
out=${OUTPUT_DIR:-$repo/_output/charts}
helm=${HELM:-$("$repo/hack/chart/helm.sh")}

args=(package "${CHART_DIR:-$repo/charts/diskplane}" --destination "$out")
[[ -z ${CHART_VERSION:-} ]] || args+=(--version "$CHART_VERSION")
[[ -z ${APP_VERSION:-} ]] || args+=(--app-version "$APP_VERSION")
mkdir -p "$out"
# Helm keeps its cache and configuration out of $HOME.
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
HELM_CACHE_HOME=$scratch/cache HELM_CONFIG_HOME=$scratch/config HELM_DATA_HOME=$scratch/data \
  "$helm" "${args[@]}" >"$scratch/out"
archive=$(sed -nE 's/^Successfully packaged chart and saved it to: (.*)$/\1/p' "$scratch/out")
[[ -f $archive ]] || { cat "$scratch/out" >&2; echo "error: helm package wrote no archive" >&2; exit 1; }
echo "$archive"
echo "sha256 $(sha256sum "$archive" | cut -d' ' -f1)" >&2
