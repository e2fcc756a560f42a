"""Where a turn's time goes, per method, from `vllm bench serve`'s per-request records.

    python docs/results/serving/epyc_finish_weights/turn_makespan.py FOLDER [BASELINE]

FOLDER holds the per-turn JSON files `entmtp bench serve --compare --client vllm` writes
(vllm-bench-r{round}-c{concurrency}-t{turn}-{method}.json); BASELINE is the method the others
are divided by (default vllm). Per concurrency and method, medians over the turns of:
- wall: the turn's output tok/s over the baseline's (what the compare table's ratio is made of);
- mean latency: the baseline's mean request latency over the method's (above 1: faster);
- last: the baseline's longest request latency over the method's;
and over the turns whose prompts outnumber the concurrency (a second wave of requests starts
only as the first wave's requests finish):
- wave-1 done: when the first wave's last request finished, over the baseline's (above 1: later);
- wave-1 behind: how many of the first wave's requests finished after the baseline's last one;
- step: the median time between streamed chunks of the first wave's 128-token requests (ms; a
  chunk is one engine step's tokens), and tokens per chunk over those requests.
"""

from __future__ import annotations

import collections
import glob
import json
import re
import statistics
import sys


def load(folder: str) -> dict:
    turns = collections.defaultdict(dict)
    for path in glob.glob(f"{folder}/vllm-bench-r*-c*-t*-*.json"):
        match = re.search(r"-r(\d+)-c(\d+)-t(\d+)-(.+)\.json$", path)
        if match is None:
            continue
        record = json.load(open(path))
        turns[(int(match[2]), int(match[1]), int(match[3]))][match[4]] = record
    return turns


def wave_one(record: dict, concurrency: int) -> list[tuple[float, float, int, list[float]]]:
    """(start, end, output tokens, inter-chunk gaps) of the turn's first `concurrency` requests."""
    start0 = min(record["start_times"])
    rows = sorted(zip(record["start_times"], record["latencies"], record["output_lens"], record["itls"]))
    return [(s - start0, s - start0 + lat, out, itl) for s, lat, out, itl in rows[:concurrency]]


def main() -> None:
    if len(sys.argv) not in (2, 3):
        sys.exit("usage: turn_makespan.py FOLDER [BASELINE]")
    folder = sys.argv[1]
    baseline = sys.argv[2] if len(sys.argv) == 3 else "vllm"
    turns = load(folder)
    if not turns:
        sys.exit(f"turn_makespan.py: no vllm-bench-r*-c*-t*-*.json in {folder}")
    for concurrency in sorted({key[0] for key in turns}):
        rows = collections.defaultdict(lambda: collections.defaultdict(list))
        for (c, _, _), records in sorted(turns.items()):
            if c != concurrency or baseline not in records:
                continue
            base = records[baseline]
            base_tps = sum(base["output_lens"]) / base["duration"]
            base_wave = wave_one(base, c) if base["num_prompts"] > c else None
            base_done = max(end for _, end, _, _ in base_wave) if base_wave else None
            for method, record in records.items():
                r = rows[method]
                r["wall"].append(sum(record["output_lens"]) / record["duration"] / base_tps)
                r["mean latency"].append(statistics.mean(base["latencies"]) / statistics.mean(record["latencies"]))
                r["last"].append(max(base["latencies"]) / max(record["latencies"]))
                if base_wave is None:
                    continue
                wave = wave_one(record, c)
                r["wave-1 done"].append(max(end for _, end, _, _ in wave) / base_done)
                r["wave-1 behind"].append(sum(end > base_done + 0.01 for _, end, _, _ in wave))
                long = [(out, itl) for _, _, out, itl in wave if out >= 128 and itl]
                if long:
                    r["step ms"].append(1e3 * statistics.median([g for _, itl in long for g in itl]))
                    r["tokens/chunk"].append(sum(out - 1 for out, _ in long) / sum(len(itl) for _, itl in long))
        print(f"concurrency {concurrency} (medians over turns; ratios: above 1 is better than {baseline},"
              f" except wave-1 done)")
        keys = ["wall", "mean latency", "last", "wave-1 done", "wave-1 behind", "step ms", "tokens/chunk"]
        print("  " + f"{'method':<14}" + "".join(f"{k:>15}" for k in keys))
        for method in sorted(rows, key=lambda m: (m != baseline, m)):
            cells = [f"{statistics.median(rows[method][k]):15.3f}" if rows[method][k] else f"{'-':>15}" for k in keys]
            print("  " + f"{method:<14}" + "".join(cells))


if __name__ == "__main__":
    main()
