"""Per-turn summary of the `wave` stage: every turn is one wave of `concurrency` prompts sent at
once, so its wall time is its slowest request's latency. For each level: the median over turns of
EntMTP's mean request latency and of its turn's wall time, each against no speculation's in the
same round and turn. Run from this folder's parent: python3 wave_summary.py vllm_client_waves"""

import glob
import json
import statistics
import sys

folder = sys.argv[1] if len(sys.argv) > 1 else "vllm_client_waves"
turns: dict[tuple[str, str, str], dict[str, dict]] = {}
for path in glob.glob(f"{folder}/vllm-bench-r*-c*-t*-*.json"):
    r, c, t, method = path.rsplit("/", 1)[1][len("vllm-bench-") : -len(".json")].split("-")
    turns.setdefault((c, r, t), {})[method] = json.load(open(path))
for level in sorted({c for c, _, _ in turns}, key=lambda c: int(c[1:])):
    mean_ratio, wall_ratio = [], []
    for (c, _, _), by_method in turns.items():
        if c != level or not {"vllm", "entmtp"} <= by_method.keys():
            continue
        base, spec = by_method["vllm"], by_method["entmtp"]
        mean_ratio.append(statistics.mean(base["latencies"]) / statistics.mean(spec["latencies"]))
        wall_ratio.append(base["duration"] / spec["duration"])
    print(
        f"concurrency {level[1:]}: {len(wall_ratio)} turns; no speculation / EntMTP, median over turns: "
        f"mean request latency {statistics.median(mean_ratio):.3f} "
        f"({min(mean_ratio):.3f}-{max(mean_ratio):.3f}), "
        f"turn wall time {statistics.median(wall_ratio):.3f} ({min(wall_ratio):.3f}-{max(wall_ratio):.3f})"
    )
