"""The before/after table of run.sh's rounds (`summary.md`), from each round's serve.json."""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path


def level(folder: Path) -> dict:
    return json.loads((folder / "serve.json").read_text())["levels"][0]


def main(here: Path) -> None:
    rows, ratios, own = [], [], {"before": [], "after": []}
    for round_ in range(1, 100):
        if not (here / f"before-r{round_}").is_dir():
            break
        before, after = level(here / f"before-r{round_}"), level(here / f"after-r{round_}")
        ratio = after["output_tokens_per_s"] / before["output_tokens_per_s"]
        ratios.append(ratio)
        own["before"].append(before["output_tokens_per_s"])
        own["after"].append(after["output_tokens_per_s"])
        rows.append(f"| {round_} | {before['output_tokens_per_s']:.2f} | {after['output_tokens_per_s']:.2f} | "
                    f"{ratio:.3f} | {before['tpot_ms']['p50']:.1f} / {after['tpot_ms']['p50']:.1f} | "
                    f"{before['output_tokens']} / {after['output_tokens']} |")
    spread = {k: (max(v) - min(v)) / min(v) for k, v in own.items()}
    print("| round | before tok/s | after tok/s | after / before | TPOT p50 ms before / after | output tokens before / after |")
    print("|---|---:|---:|---:|---|---|")
    print("\n".join(rows))
    print(f"\nMedian after / before: **{statistics.median(ratios):.3f}** (rounds {min(ratios):.3f}-{max(ratios):.3f}). "
          f"Spread of each side's own rounds: before {spread['before']:.1%}, after {spread['after']:.1%}.")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
