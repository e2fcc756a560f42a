#!/usr/bin/env bash
# Can `entmtp-vllm[gpu]` be installed beside each vLLM release? pip's resolver, without installing
# anything (`pip install --dry-run`, metadata only), for this checkout with vllm==0.32.0 and
# vllm==0.33.0; writes resolve-vllm-<version>.txt next to itself: pip's exit status and the
# versions it would install of the packages that matter (vLLM, torch, Triton, transformers).
#
#   bash docs/results/vllm_compat/resolve.sh          # PYTHON=python3.11 to pick the interpreter
set -uo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../../.." && pwd)"
PY="${PYTHON:-python3}"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
for version in 0.32.0 0.33.0; do
    out="$HERE/resolve-vllm-$version.txt"
    "$PY" -m pip install --dry-run --ignore-installed --no-cache-dir --quiet --report "$WORK/report.json" \
        "entmtp-vllm[gpu] @ file://$REPO" "vllm==$version" > "$WORK/log.txt" 2>&1
    rc=$?
    {
        echo "pip install --dry-run 'entmtp-vllm[gpu] @ <this checkout>' vllm==$version: exit status $rc"
        "$PY" --version
        "$PY" -m pip --version | cut -d' ' -f1-2
        if [ "$rc" -eq 0 ]; then
            "$PY" - "$WORK/report.json" <<'PYEOF'
import json, sys
report = json.load(open(sys.argv[1]))
found = {item["metadata"]["name"].lower(): item["metadata"]["version"] for item in report["install"]}
for name in ("entmtp-vllm", "vllm", "torch", "triton", "transformers"):
    print(f"would install {name} {found.get(name, '(none)')}")
PYEOF
        else
            grep -A12 "conflict is caused by" "$WORK/log.txt" || tail -20 "$WORK/log.txt"
        fi
    } > "$out"
    cat "$out"
done
