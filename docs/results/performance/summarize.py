"""The Performance page's table and figure from `entmtp bench serve --compare` runs.

    .venv/bin/python docs/results/performance/summarize.py docs/results/performance

Reads FOLDER/greedy/compare.json and FOLDER/t07/compare.json (each row's `tps_ratio` is the
method's output tok/s over vLLM without speculation at the same concurrency, measured in the same
run), prints one Markdown table (vLLM's tok/s, then each speculative method's ratio, per
concurrency and temperature) and writes FOLDER/speedup.png: one panel per temperature, one line
per speculative method, the no-speculation baseline at 1.0.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

PANELS = (("greedy", "greedy (T=0)"), ("t07", "sampled (T=0.7)"))
LABELS = {"entmtp": "EntMTP", "ngram": "vLLM ngram"}


def ratios(compare: dict) -> dict[str, tuple[list[int], list[float]]]:
    """Per speculative method: its concurrency levels and tok/s ratios to no speculation."""
    lines: dict[str, tuple[list[int], list[float]]] = {}
    for row in compare["table"]:
        if row["method"] == "vllm":
            continue
        levels, values = lines.setdefault(row["method"], ([], []))
        levels.append(int(row["concurrency"]))
        values.append(float(row["tps_ratio"]))
    return lines


def table(folder: Path) -> str:
    """Markdown: per concurrency, vLLM's tok/s and each method's ratio, greedy then T=0.7."""
    runs = {name: json.loads((folder / name / "compare.json").read_text())["table"] for name, _ in PANELS}
    methods = [m for m in LABELS if any(row["method"] == m for row in runs["greedy"])]
    head = ["concurrency"]
    for _, title in PANELS:
        head += [f"{title}: vLLM tok/s"] + [f"{title}: {LABELS[m]}" for m in methods]
    lines = ["| " + " | ".join(head) + " |", "|" + "---:|" * len(head)]
    levels = sorted({int(row["concurrency"]) for row in runs["greedy"]})
    for level in levels:
        cells = [str(level)]
        for name, _ in PANELS:
            rows = {row["method"]: row for row in runs[name] if int(row["concurrency"]) == level}
            cells.append(f"{rows['vllm']['output_tokens_per_s']:.1f}")
            cells += [f"{rows[m]['tps_ratio']:.2f}×" for m in methods]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(folder: Path) -> None:
    print(table(folder))
    fig, axes = plt.subplots(1, len(PANELS), figsize=(9, 3.6), sharey=True)
    for ax, (name, title) in zip(axes, PANELS):
        compare = json.loads((folder / name / "compare.json").read_text())
        for method, (levels, values) in ratios(compare).items():
            ax.plot(levels, values, marker="o", label=LABELS.get(method, method))
        ax.axhline(1.0, color="grey", linestyle="--", linewidth=1, label="vLLM, no speculation")
        ax.set_xscale("log", base=2)
        ax.set_xticks([1, 4, 8, 16], labels=["1", "4", "8", "16"])
        ax.set_title(title)
        ax.set_xlabel("concurrent requests")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("output tok/s / no speculation")
    axes[0].legend(fontsize=8)
    fig.suptitle("SmolLM2-135M-Instruct served by vLLM on CPU, loaded by vLLM's client", fontsize=10)
    fig.tight_layout()
    fig.savefig(folder / "speedup.png", dpi=120)


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parent)
