"""Which greedy outputs of `greedy_outputs.py` agree token for token, pair by pair; writes
`<out>/agreement.md` and prints it.

    python compare.py OUT_DIR
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

PAIRS = [
    ("nospec-{d}-one", "nospec-{d}-all", "no speculation: one at a time vs all at once"),
    ("entmtp-{d}-one", "nospec-{d}-one", "EntMTP vs no speculation, one at a time"),
    ("entmtp-{d}-all", "nospec-{d}-all", "EntMTP vs no speculation, all at once"),
]


def first_difference(a: list[int], b: list[int]) -> int | None:
    """Index of the first token where a and b differ (a length difference counts); None: equal."""
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def main() -> None:
    out = Path(sys.argv[1])
    runs = {p.stem: json.loads(p.read_text()) for p in out.glob("*-*-*.json")}
    dtypes = sorted({run["dtype"] for run in runs.values()})
    lines = ["| dtype | pair | prompts identical | first differing token of the others |", "|---|---|---:|---|"]
    for dtype in dtypes:
        for left, right, label in PAIRS:
            a, b = runs.get(left.format(d=dtype)), runs.get(right.format(d=dtype))
            if a is None or b is None:
                continue
            diffs = [first_difference(x, y) for x, y in zip(a["tokens"], b["tokens"])]
            differing = sorted(d for d in diffs if d is not None)
            lines.append(f"| {dtype} | {label} | {len(diffs) - len(differing)} / {len(diffs)} | "
                         f"{', '.join(map(str, differing)) or '–'} |")
    text = "\n".join(lines) + "\n"
    (out / "agreement.md").write_text(text)
    print(text, end="")


if __name__ == "__main__":
    main()
