#!/usr/bin/env bash
# Builds the Collector of otelcol/builder-config.yaml with the OpenTelemetry Collector Builder into
#   ${RAGAUDIT_CACHE:-~/.cache/ragaudit}/otelcol/<sha256 of the manifest>/otelcol-ragaudit
# and prints that path. A cached binary is reused: the build (contrib components, a few hundred Go
# packages) takes many minutes on a small machine, and changes only when the manifest does.
# Exits 0 with a note, building nothing, where Go is absent (the tests that need the binary then skip
# and say why); RAGAUDIT_OTELCOL_REQUIRED=1 makes that an error instead.
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
manifest="${1:-$root/otelcol/builder-config.yaml}"
builder_version="v0.161.0"   # the builder at the manifest's core release

go_bin="$(command -v go || true)"
if [ -z "$go_bin" ] && [ -x /usr/local/go/bin/go ]; then go_bin=/usr/local/go/bin/go; fi
if [ -z "$go_bin" ]; then
  echo "note: go not found; not building the OpenTelemetry Collector (its tests will skip)" >&2
  [ "${RAGAUDIT_OTELCOL_REQUIRED:-0}" = "1" ] && exit 1
  exit 0
fi
export PATH="$(dirname "$go_bin"):$PATH"

digest="$(sha256sum "$manifest" | cut -c1-64)"
out_dir="${RAGAUDIT_CACHE:-$HOME/.cache/ragaudit}/otelcol/$digest"
binary="$out_dir/otelcol-ragaudit"
if [ -x "$binary" ]; then
  echo "$binary"
  exit 0
fi

# Build beside the final directory and move it into place at the end, so an interrupted build never
# leaves a directory that looks finished.
work="$out_dir.partial.$$"
rm -rf "$work"
mkdir -p "$work"
trap 'rm -rf "$work"' EXIT
start=$(date +%s)
echo "building the OpenTelemetry Collector (builder $builder_version) into $out_dir; this takes minutes" >&2
GOFLAGS="${GOFLAGS:-} -mod=mod" CGO_ENABLED=0 \
  go run "go.opentelemetry.io/collector/cmd/builder@$builder_version" \
    --config "$manifest" --output-path "$work" >&2
rm -rf "$out_dir"
mv "$work" "$out_dir"
trap - EXIT
echo "built in $(( $(date +%s) - start )) s" >&2
echo "$binary"
