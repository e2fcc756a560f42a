#!/usr/bin/env bash
# The EntMTP plugin's compatibility check (entmtp_vllm/vllm_plugin/compat/) against the installed
# vLLM and against a vLLM release downloaded as a wheel (not installed): the check reads both
# sources with ast, so nothing of vLLM is imported and no GPU is needed.
#
#   bash docs/results/vllm_compat/run.sh                 # from anywhere
#   VERSION=0.33.0 WHEEL_DIR=/tmp/v bash .../run.sh      # reuse a wheel already in /tmp/v
#
# Writes next to itself: vllm-<installed>.txt / .json, vllm-<VERSION>.txt / .json (every entry,
# `ok` or `DIFF`, and the summary line) and vllm-<VERSION>-requires.txt (the torch, triton,
# transformers and flashinfer pins of the release's wheel metadata).
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../../.." && pwd)"
cd "$repo"
python="${PYTHON:-$repo/.venv/bin/python}"
version="${VERSION:-0.33.0}"

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
wheels="${WHEEL_DIR:-$work/wheel}"
if ! compgen -G "$wheels/vllm-$version-*.whl" >/dev/null; then
    "$python" -m pip download "vllm==$version" --no-deps --quiet -d "$wheels"
fi
wheel="$(compgen -G "$wheels/vllm-$version-*.whl" | head -n 1)"
unzip -q "$wheel" 'vllm/*' -d "$work/src"
unzip -p "$wheel" "vllm-$version.dist-info/METADATA" \
    | grep -E '^Requires-Dist: (torch|triton|transformers|flashinfer)' > "$here/vllm-$version-requires.txt" || true

# check NAME [--vllm-source DIR]: both outputs under vllm-NAME.*; the exit status is reported, not fatal
check() {
    local name="$1"
    shift
    local rc=0
    "$python" -m entmtp_vllm.vllm_plugin.compat --all "$@" > "$here/vllm-$name.txt" || rc=$?
    "$python" -m entmtp_vllm.vllm_plugin.compat --json --all "$@" > "$here/vllm-$name.json" || true
    echo "vllm-$name: exit status $rc: $(tail -n 1 "$here/vllm-$name.txt")"
}

installed="$("$python" -m entmtp_vllm.vllm_plugin.compat --json | "$python" -c 'import json, sys; print(json.load(sys.stdin)["vllm_version"])' || true)"
check "${installed:-installed}"
check "$version" --vllm-source "$work/src"
