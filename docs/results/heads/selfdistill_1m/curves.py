"""Held-out top-1 per head against the training step, for every head kind trained on this data:
the runs of `run.sh`'s train stage (their JSONL logs) and session 21's 1-layer runs (their
committed text logs), so that the kinds compare at equal steps while the runs are still going.

    .venv/bin/python docs/results/heads/selfdistill_1m/curves.py [RUN_DIR]   # default: runs/heads2

Writes curves.md (each run's last and best evaluation, and top-1 per head every 200 steps, or
every 1000 once a run under way passes step 2000, with – where a run has not got there) and
curves.png beside this file. Every evaluation uses 4096 held-out positions; the held-out records
are chosen by record id, so a run trained while the cache was still growing was evaluated on
fewer of them than session 21's 250.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

HERE = Path(__file__).parent
RUNS = {  # label: (run folder under RUN_DIR or None, committed text log or None)
    "Hydra, 1 layer (session 21)": (None, "train_hydra_1layer_s21.log"),
    "Hydra++, 1 layer (session 21)": (None, "train_hydrapp_1layer_s21.log"),
    "Hydra, 4 layers": ("hydra4", None),
    "Hydra++, 4 layers (published recipe)": ("hydrapp", None),
}
_LINE = re.compile(r"step (\d+)/\d+ loss [0-9.]+ val top1 \[([0-9., ]+)\]")


def read_curve(run_dir: Path, folder: str | None, text_log: str | None) -> dict[int, list[float]]:
    """{step: top-1 per head} of one run (empty when it has not evaluated yet)."""
    if folder is not None:
        path = run_dir / folder / "train_log.jsonl"
        if not path.is_file():
            return {}
        records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        return {r["step"]: r["val"]["top1"] for r in records}
    text = (HERE / text_log).read_text().replace("\r", "\n")
    return {int(m.group(1)): [float(x) for x in m.group(2).split(",")] for m in _LINE.finditer(text)}


def _fmt(top1: list[float]) -> str:
    return " / ".join(f"{x:.3f}" for x in top1)


def write_report(curves: dict[str, dict[int, list[float]]]) -> str:
    present = {label: c for label, c in curves.items() if c}
    lines = ["# Held-out top-1 per head against the training step", "",
             "Written by [curves.py](curves.py) from the training logs (top-1 agreement with the teacher's argmax,",
             "teacher-forced, 4096 held-out positions; issue #21's target 0.55 / 0.45 / 0.40 / 0.37).", ""]
    if not present:
        return "\n".join(lines + ["No run has evaluated yet.", ""])
    lines += ["## Each run's last and best evaluation", "",
              "| run | last step | top-1 there | best step (mean top-1) | top-1 there |", "|---|---:|---|---:|---|"]
    for label, c in present.items():
        last = max(c)
        best = max(c, key=lambda s: (sum(c[s]), -s))
        lines.append(f"| {label} | {last} | {_fmt(c[last])} | {best} | {_fmt(c[best])} |")
    live = [max(c) for label, c in present.items() if RUNS[label][0] is not None] or [max(map(max, present.values()))]
    limit = max(live)  # the runs under way set how far the table goes
    stride = 200 if limit <= 2000 else 1000
    marks = sorted({s for c in present.values() for s in c if s <= limit and (s % stride == 0 or s in live)})
    lines += ["", f"## At equal steps (every {stride} steps up to the furthest run under way; – not reached)", "",
              "| step | " + " | ".join(present) + " |", "|---:|" + "---|" * len(present)]
    lines += [f"| {s} | " + " | ".join(_fmt(c[s]) if s in c else "–" for c in present.values()) + " |" for s in marks]
    return "\n".join(lines + [""])


def plot(curves: dict[str, dict[int, list[float]]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 4, figsize=(16, 4), sharex=True)
    for label, c in curves.items():
        if not c:
            continue
        steps = sorted(c)
        for head, ax in enumerate(axes):
            ax.plot(steps, [c[s][head] for s in steps], label=label, linewidth=1.2)
    for head, (ax, target) in enumerate(zip(axes, (0.55, 0.45, 0.40, 0.37))):
        ax.axhline(target, color="grey", linestyle=":", linewidth=1)
        ax.set_title(f"head {head + 1} (target {target})")
        ax.set_xlabel("step (256 positions)")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("held-out top-1")
    axes[0].legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv: list[str]) -> int:
    run_dir = Path(argv[0]) if argv else Path("runs/heads2")
    curves = {label: read_curve(run_dir, folder, text) for label, (folder, text) in RUNS.items()}
    (HERE / "curves.md").write_text(write_report(curves))
    plot(curves, HERE / "curves.png")
    print(f"wrote {HERE / 'curves.md'} and {HERE / 'curves.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
