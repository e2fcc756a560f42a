"""Reports of serving benchmarks: Markdown tables of a load test (`markdown_report`) and of a
comparison (`compare_markdown`, every round when there are several), a PNG plot of tok/s and
TPOT against concurrency, and the JSON, Markdown and PNG files written together."""

from __future__ import annotations

import json
import os
import shlex
from pathlib import Path
from typing import Any

from entmtp_vllm.bench.serve.config import BASELINE, METRICS_FROM_SERVER, VARIANT_PREFIX
from entmtp_vllm.bench.serve.interleave import single_turn_levels
from entmtp_vllm.bench.serve.statistics import _stat, round_ratios
from entmtp_vllm.errors import EntMTPError


def _fmt(value: Any, digits: int = 1) -> str:
    if value is None:
        return "–"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def markdown_report(results: dict[str, Any]) -> str:
    """A run's levels as Markdown tables: latencies, then acceptance (when the server has it)."""
    cfg = results["config"]
    mode = "chat" if cfg["chat"] else "completions"
    amount = f"{cfg['duration']:g} s per level" if cfg.get("duration") else f"{results['num_prompts']} prompts per level"
    if cfg.get("duration"):
        amount += (" (output tok/s: the server's generated tokens over the window while every client was busy; "
                   "the drain after it is left out, see drained_tokens_per_s in serve.json)")
    lines = [
        f"Serve benchmark — `{results['model']}` at {results['base_url']}; {', '.join(cfg['datasets'])}, {amount}, "
        f"max {cfg['max_tokens']} tokens, T={cfg['temperature']}, {mode}; {results['date']}"
        + (f"; counters from `{cfg['metrics_from']}`" if cfg.get("metrics_from", METRICS_FROM_SERVER) != METRICS_FROM_SERVER else ""),
        "",
        "| concurrency | ok | failed | output tok/s | req/s | TTFT mean / p50 / p90 / p99 (ms) | "
        "TPOT mean / p50 / p90 / p99 (ms) | ITL mean / p50 / p90 / p99 (ms) | τ |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]

    def four(summary):
        if summary is None:
            return "–"
        return " / ".join(f"{summary[k]:.1f}" for k in ("mean", "p50", "p90", "p99"))

    for level in results["levels"]:
        acc = level.get("acceptance") or {}
        lines.append(
            f"| {level['concurrency']} | {level['completed']} | {level['failed']} | {level['output_tokens_per_s']:.2f} | "
            f"{level['requests_per_s']:.3f} | {four(level['ttft_ms'])} | {four(level['tpot_ms'])} | "
            f"{four(level['itl_ms'])} | {_fmt(acc.get('mean_acceptance_length'), 3)} |"
        )
    if any(level.get("acceptance") for level in results["levels"]):
        lines += [
            "",
            "| concurrency | drafts | draft tokens | accepted | mean acceptance length | acceptance rate | tree usage |",
            "|---:|---:|---:|---:|---:|---:|---|",
        ]
        for level in results["levels"]:
            acc = level.get("acceptance")
            if not acc:
                continue
            usage = acc.get("tree_usage") or {}
            usage_text = ", ".join(f"`{name}` {count:g}" for name, count in usage.items()) or "–"
            lines.append(
                f"| {level['concurrency']} | {_fmt(acc.get('num_drafts'), 0)} | {_fmt(acc.get('num_draft_tokens'), 0)} | "
                f"{_fmt(acc.get('num_accepted_tokens'), 0)} | {_fmt(acc.get('mean_acceptance_length'), 3)} | "
                f"{_fmt(acc.get('draft_acceptance_rate'), 3)} | {usage_text} |"
            )
    lines += _replicas_markdown(results["levels"])
    lines += _overhead_markdown(results["levels"])
    lines += _slow_reads_markdown(results["levels"])
    failures = [(level["concurrency"], error) for level in results["levels"] for error in level["errors"]]
    if failures:
        lines += ["", "Errors (first few per level):"]
        lines += [f"- concurrency {c}: {error}" for c, error in failures]
    return "\n".join(lines) + "\n"


def _slow_reads_markdown(levels: list[dict[str, Any]], who: str = "") -> list[str]:
    """A warning for every `--duration` level whose deadline read of the counters took more than
    5% of its window: the window's end (the read's midpoint) is uncertain by half the read.
    `who`: the server the levels are of, in a comparison."""
    slow = [(level["concurrency"], level["window"]) for level in levels
            if level.get("window") and level["window"].get("read_s", 0.0) > 0.05 * level["window"]["seconds"]]
    return ["", *(f"Warning: {who}at concurrency {c} the deadline's counter read took {w['read_s']:.2f} s of a "
                  f"{w['seconds']:.2f} s window; its output tok/s is uncertain by ±{50 * w['read_s'] / w['seconds']:.0f}%"
                  for c, w in slow)] if slow else []


def _replicas_markdown(levels: list[dict[str, Any]]) -> list[str]:
    """Each replica's own drafts and accepted tokens per level (counters summed over replicas,
    `metrics_from: ray:<dir>`); nothing for one server."""
    rows = []
    for level in levels:
        for name, counts in ((level.get("acceptance") or {}).get("replicas") or {}).items():
            drafts, accepted = counts["num_drafts"], counts["num_accepted_tokens"]
            length = 1.0 + accepted / drafts if drafts > 0 else None
            rows.append(f"| {level['concurrency']} | `{name}` | {_fmt(drafts, 0)} | {_fmt(counts['num_draft_tokens'], 0)} | "
                        f"{_fmt(accepted, 0)} | {_fmt(length, 3)} |")
    if not rows:
        return []
    return ["", "Per replica (the acceptance table above sums them):", "",
            "| concurrency | replica | drafts | draft tokens | accepted | mean acceptance length |",
            "|---:|---|---:|---:|---:|---:|", *rows]


def _plot(series: dict[str, list[dict[str, Any]]], path: Path, title: str) -> None:
    """Two panels: output tok/s and TPOT p50 against concurrency, one line per series."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(9.0, 3.6))
    for name, levels in series.items():
        xs = [level["concurrency"] for level in levels]
        left.plot(xs, [level["output_tokens_per_s"] for level in levels], marker="o", label=name)
        tpot = [_stat(level["tpot_ms"], "p50") for level in levels]
        right.plot(xs, [float("nan") if t is None else t for t in tpot], marker="o", label=name)
    for ax, ylabel in ((left, "output tokens / s"), (right, "TPOT p50 (ms)")):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("concurrency")
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
        ax.set_ylim(bottom=0)
        ticks = sorted({level["concurrency"] for levels in series.values() for level in levels})
        ax.set_xticks(ticks, [str(t) for t in ticks])
    if len(series) > 1:
        left.legend(fontsize=8)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _out_dir(out_dir: str | os.PathLike[str]) -> Path:
    out = Path(out_dir)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise EntMTPError(f"cannot create output folder {out}: {exc.strerror or exc}") from None
    return out


def write_report(results: dict[str, Any], out_dir: str | os.PathLike[str], stem: str = "serve") -> dict[str, Path]:
    """`<stem>.json`, `<stem>.md` and `<stem>.png` in `out_dir` (created)."""
    out = _out_dir(out_dir)
    paths = {"json": out / f"{stem}.json", "markdown": out / f"{stem}.md", "png": out / f"{stem}.png"}
    paths["json"].write_text(json.dumps(results, indent=1) + "\n", encoding="utf-8")
    paths["markdown"].write_text(markdown_report(results), encoding="utf-8")
    _plot({results["model"]: results["levels"]}, paths["png"], f"{results['model']} — {', '.join(results['config']['datasets'])}")
    return paths


def _rounds_markdown(results: dict[str, Any]) -> list[str]:
    """Every round's tok/s and ratio (to that round's baseline) per level and method."""
    rounds = results.get("rounds") or []
    if len(rounds) < 2:
        return []
    methods = results["config"]["methods"]
    lines = [
        "",
        f"{len(rounds)} rounds; the table above shows, per method and level, the round with the median output "
        "tok/s (its ratios are to the baseline's median round). Every round (tok/s, and in brackets the ratio "
        f"to `{BASELINE}` of the same round):",
        "",
        "| round | order | concurrency | " + " | ".join(methods) + " |",
        "|---:|---|---:|" + "---:|" * len(methods),
    ]
    for number, entry in enumerate(rounds, start=1):
        by = {(row["concurrency"], row["method"]): row for row in entry["table"]}
        for concurrency in sorted({row["concurrency"] for row in entry["table"]}):
            cells = [
                f"{by[concurrency, m]['output_tokens_per_s']:.2f} ({_fmt(by[concurrency, m]['tps_ratio'], 3)})"
                if (concurrency, m) in by else "–"
                for m in methods
            ]
            lines.append(f"| {number} | {', '.join(entry['order'])} | {concurrency} | " + " | ".join(cells) + " |")
    spread = results.get("round_ratios") or round_ratios(rounds)
    if spread:
        lines += ["", "Ratio to no speculation over the rounds (median, min–max):", ""]
        lines += [f"- concurrency {r['concurrency']}, `{r['method']}`: {r['median']:.3f} ({r['min']:.3f}–{r['max']:.3f})"
                  for r in spread]
    return lines


def _overhead_markdown(levels: list[dict[str, Any]]) -> list[str]:
    """EntMTP's step time and its own share of it, per level (nothing when no level has it)."""
    rows = [(level["concurrency"], (level.get("acceptance") or {}).get("overhead")) for level in levels]
    rows = [(c, o) for c, o in rows if o]
    if not rows:
        return []
    phases = sorted({phase for _, o in rows for phase in o["phase_ms"]})
    lines = [
        "",
        "| concurrency | EntMTP step (ms) | EntMTP's own share | " + " | ".join(f"{p} (ms/step)" for p in phases) + " |",
        "|---:|---:|---:|" + "---:|" * len(phases),
    ]
    for concurrency, o in rows:
        cells = " | ".join(_fmt(o["phase_ms"].get(p), 2) for p in phases)
        lines.append(f"| {concurrency} | {o['step_ms']:.1f} | {100 * o['share']:.1f}% | {cells} |")
    return lines


def _same_outputs_markdown(results: dict[str, Any]) -> list[str]:
    """Greedy or seeded runs: how many prompts got the baseline's output from each method."""
    rows = [row for row in results["table"] if row.get("same_outputs") is not None]
    if not rows:
        return []
    seed = results["config"].get("request_seed")
    how = "greedy" if results["config"]["temperature"] == 0 else f"T={results['config']['temperature']}, seed {seed}"
    cells = [f"`{row['method']}` {row['same_outputs'][0]}/{row['same_outputs'][1]} at concurrency {row['concurrency']}"
             for row in rows]
    return ["", f"Outputs identical to `{BASELINE}`'s, prompt by prompt ({how}): " + ", ".join(cells) + "."]


def compare_markdown(results: dict[str, Any]) -> str:
    cfg = results["config"]
    lines = [
        f"Serve comparison — `{results['model']}`; {', '.join(cfg['datasets'])}, {results['num_prompts']} prompts per "
        f"level, max {cfg['max_tokens']} tokens, T={cfg['temperature']}, {'chat' if cfg['chat'] else 'completions'}; "
        f"server args `{shlex.join(cfg['server_args']) or '(none)'}`; {results['date']}",
        "",
        f"Ratios are against `{BASELINE}` (no speculation) at the same concurrency: tok/s ratio > 1 and TPOT ratio < 1 "
        "are better. Client CPU: the load generator's own CPU time over the level's wall time (100% = one core busy "
        "throughout), on the machine the servers run on when they share it.",
        "",
    ]
    if cfg.get("interleave"):
        lines += [
            f"Interleaved (`--interleave {cfg['interleave']}`): every server up at once; each level's prompts sent in "
            f"turns of {cfg['interleave']} × concurrency prompts to one server after another, the order rotating every "
            "turn; a level's tok/s is its tokens over the sum of its turns' wall times (every turn drains its batch).",
            "",
        ]
        whole = single_turn_levels(cfg["concurrency"], results["num_prompts"], cfg["interleave"])
        if whole:
            lines += [f"At concurrency {', '.join(map(str, whole))} the level's {results['num_prompts']} prompts are one turn: "
                      "there each server served the whole level after the other, not paired within it.", ""]
    variants = cfg.get("entmtp_variants") or {}
    lines += [f"`{VARIANT_PREFIX}{label}`: `entmtp` with `{json.dumps(settings)}`." for label, settings in variants.items()]
    lines += [""] if variants else []
    lines += [
        "| concurrency | method | output tok/s | tok/s ratio | TPOT p50 (ms) | TPOT ratio | TTFT p50 (ms) | τ | "
        "EntMTP's share of step time | client CPU | ok | failed |",
        "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in results["table"]:
        share, client = row.get("overhead_share"), row.get("client_cpu_share")
        lines.append(
            f"| {row['concurrency']} | {row['method']} | {row['output_tokens_per_s']:.2f} | {_fmt(row['tps_ratio'], 3)} | "
            f"{_fmt(row['tpot_p50_ms'])} | {_fmt(row['tpot_ratio'], 3)} | {_fmt(row['ttft_p50_ms'])} | "
            f"{_fmt(row['mean_acceptance_length'], 3)} | {'–' if share is None else f'{100 * share:.1f}%'} | "
            f"{'–' if client is None else f'{100 * client:.0f}%'} | {row['completed']} | {row['failed']} |"
        )
    lines += _same_outputs_markdown(results)
    lines += _rounds_markdown(results)
    rounds = results.get("rounds") or [{"runs": results["runs"]}]
    for number, entry in enumerate(rounds, start=1):
        where = f" (round {number})" if len(rounds) > 1 else ""
        for method, run in entry["runs"].items():
            lines += _slow_reads_markdown(run["levels"], f"`{method}`{where} ")
            errors = [(lv["concurrency"], e) for lv in run["levels"] for e in lv["errors"]]
            if errors:
                lines += ["", f"Errors of `{method}`{where}:"] + [f"- concurrency {c}: {e}" for c, e in errors]
    return "\n".join(lines) + "\n"


def write_compare_report(results: dict[str, Any], out_dir: str | os.PathLike[str], stem: str = "compare") -> dict[str, Path]:
    out = _out_dir(out_dir)
    paths = {"json": out / f"{stem}.json", "markdown": out / f"{stem}.md", "png": out / f"{stem}.png"}
    paths["json"].write_text(json.dumps(results, indent=1) + "\n", encoding="utf-8")
    paths["markdown"].write_text(compare_markdown(results), encoding="utf-8")
    _plot(
        {method: run["levels"] for method, run in results["runs"].items()},
        paths["png"],
        f"{Path(results['model']).name} — {', '.join(results['config']['datasets'])}, max {results['config']['max_tokens']} tokens",
    )
    return paths
