"""Did a soak's memory stay bounded? Reads run_soak.sh's memory.csv, prints a Markdown summary.

Bounded means: after the first minute (the engine's warm-up, the first batches of every shape),
the resident memory of the server's process tree grows by less than 5% up to the end of the
load. The verdict line says which, with the figures it was judged on.
"""

from __future__ import annotations

import csv
import sys
from pathlib import Path

WARMUP_S = 60
GROWTH = 0.05


def main(path: Path) -> None:
    rows = [(int(r["seconds"]), float(r["rss_mib"]), int(r["processes"])) for r in csv.DictReader(path.open())]
    after = [rss for seconds, rss, _ in rows if seconds >= WARMUP_S]
    if len(after) < 2:
        raise SystemExit(f"{path}: fewer than two samples after the first {WARMUP_S} s")
    first, last, peak = after[0], after[-1], max(rss for _, rss, _ in rows)
    growth = (last - first) / first
    print(f"| samples | seconds | processes | RSS at {WARMUP_S} s | RSS at the end | peak | growth after {WARMUP_S} s |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    print(f"| {len(rows)} | {rows[-1][0]} | {rows[-1][2]} | {first:.0f} MiB | {last:.0f} MiB | {peak:.0f} MiB | {growth:+.1%} |")
    verdict = "bounded" if growth < GROWTH else "NOT bounded"
    print(f"\nMemory {verdict}: the server's processes grew {growth:+.1%} from {WARMUP_S} s to the end "
          f"(threshold {GROWTH:.0%}).")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
