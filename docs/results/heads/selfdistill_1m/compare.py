"""The engine stage's table (issue #21, item 3 and 5): engine τ per test split for every heads
folder, with mc_sim_7b_63 and with the task's bank, against issue #21's targets, and whether a
new kind beats the shipped heads on every split (the condition to ship it).

    .venv/bin/python docs/results/heads/selfdistill_1m/compare.py [ENGINE_DIR]   # default: engine/ beside this file
    .venv/bin/python docs/results/heads/selfdistill_1m/compare.py DIR --heads shipped="shipped Hydra" \
        --heads warm="warm start" --shipped shipped                          # other folder names

ENGINE_DIR holds what `run.sh`'s engine stage wrote: one `bench offline` folder per
`<task>_<heads>` with its offline.json. Writes ENGINE_DIR/engine.md and engine.json.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

TASKS = ("mt_bench", "gsm8k", "humaneval", "sharegpt")
HEADS = {"heads_smollm2-135m-hydra": "shipped Hydra", "hydra4_heads": "Hydra, 4 layers (1M)", "hydrapp_heads": "Hydra++, 4 layers (1M)"}
SHIPPED = "heads_smollm2-135m-hydra"
TARGET_TAU = 2.4  # issue #21: engine τ with mc_sim_7b_63 on MT-bench, and averaged over the four tasks


def _method(methods: dict, prefix: str) -> dict | None:
    found = [m for key, m in methods.items() if key.startswith(prefix)]
    return found[0] if found else None


def collect(engine: Path, heads_labels: dict[str, str] = HEADS) -> dict:
    """{heads: {task: {"tree_tau", "bank_tau", "bank_speedup", "prompts"}}} for the folders present."""
    table: dict = {}
    for heads in heads_labels:
        for task in TASKS:
            path = engine / f"{task}_{heads}" / "offline.json"
            if not path.is_file():
                continue
            data = json.loads(path.read_text())
            tree = _method(data["methods"], "tree:")
            bank = _method(data["methods"], "bank:")
            table.setdefault(heads, {})[task] = {
                "tree_tau": tree and tree["mean_accept_length"], "bank_tau": bank and bank["mean_accept_length"],
                "bank_speedup": bank and bank.get("speedup"), "prompts": data["num_prompts"],
            }
    return table


def _mean(values: list) -> float | None:
    values = [v for v in values if v is not None]
    return sum(values) / len(values) if values else None


def _fmt(value: float | None, digits: int = 3) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def report(table: dict, heads_labels: dict[str, str] = HEADS, shipped_key: str = SHIPPED) -> tuple[str, dict]:
    lines = ["# Engine τ per test split (reference engine, greedy, float32)", "",
             "| heads | " + " | ".join(f"{t}: mc_sim_7b_63 τ / bank τ (bank × AR)" for t in TASKS)
             + " | mean mc_sim_7b_63 τ |", "|---|" + "---:|" * (len(TASKS) + 1)]
    verdict = {}
    for heads, label in heads_labels.items():
        rows = table.get(heads, {})
        if not rows:
            continue
        cells = []
        for task in TASKS:
            r = rows.get(task)
            cells.append("–" if r is None else f"{_fmt(r['tree_tau'])} / {_fmt(r['bank_tau'])} ({_fmt(r['bank_speedup'], 2)}×)")
        mean = _mean([rows[t]["tree_tau"] for t in TASKS if t in rows])
        lines.append(f"| {label} | " + " | ".join(cells) + f" | {_fmt(mean)} |")
        mt = rows.get("mt_bench", {}).get("tree_tau")
        verdict[heads] = {"complete": all(t in rows for t in TASKS), "mean_tree_tau": mean, "mt_bench_tree_tau": mt,
                          "targets_met": bool(mt and mean and mt >= TARGET_TAU and mean >= TARGET_TAU)}
    shipped = table.get(shipped_key, {})
    lines.append("")
    for heads, v in verdict.items():
        if heads == shipped_key:
            continue
        rows = table[heads]
        better = v["complete"] and all(
            t in shipped and rows[t][key] is not None and shipped[t][key] is not None and rows[t][key] > shipped[t][key]
            for t in TASKS for key in ("tree_tau", "bank_tau"))
        v["better_than_shipped_on_every_split"] = better
        lines.append(f"- {heads_labels[heads]}: MT-bench τ {_fmt(v['mt_bench_tree_tau'])}, mean {_fmt(v['mean_tree_tau'])} "
                     f"(target ≥ {TARGET_TAU} both: {'met' if v['targets_met'] else 'not met'}); "
                     f"{'beats' if better else 'does not beat'} the shipped heads on every split and both tree sets"
                     + ("" if v["complete"] else " (not every split has run)"))
    return "\n".join(lines) + "\n", verdict


def main() -> None:
    parser = argparse.ArgumentParser(description="engine τ per test split against issue #21's targets")
    parser.add_argument("engine", nargs="?", type=Path, default=Path(__file__).with_name("engine"))
    parser.add_argument("--heads", action="append", metavar="KEY=LABEL",
                        help="a folder suffix <task>_KEY and its label, in table order (default: this run's three)")
    parser.add_argument("--shipped", default=SHIPPED, help="the KEY of the shipped heads, which the others must beat")
    args = parser.parse_args()
    labels = dict(item.split("=", 1) for item in args.heads) if args.heads else HEADS
    table = collect(args.engine, labels)
    if not table:
        parser.exit(1, f"no engine runs under {args.engine} (run.sh's engine stage writes them)\n")
    text, verdict = report(table, labels, args.shipped)
    engine = args.engine
    (engine / "engine.md").write_text(text)
    (engine / "engine.json").write_text(json.dumps({"table": table, "verdict": verdict}, indent=2) + "\n")
    print(text)


if __name__ == "__main__":
    main()
