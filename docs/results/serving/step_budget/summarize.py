"""Print the tables of this folder's README from the runs' compare.json files (and of any other
`bench serve --compare` folder given; a column for the draft gate when the runs have it).

    .venv/bin/python docs/results/serving/step_budget/summarize.py [FOLDER ...]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def table(folder: Path) -> None:
    results = json.loads((folder / "compare.json").read_text())
    rounds = results.get("rounds") or [{"runs": results["runs"], "table": results["table"]}]
    print(f"### {folder.name}: {results['num_prompts']} prompts, T={results['config']['temperature']}, "
          f"client {results['config'].get('client', 'entmtp')}, {len(rounds)} round(s)\n")
    gated = any(((lv.get("acceptance") or {}).get("entmtp") or {}).get("gate_skips") is not None
                for lv in results["runs"]["entmtp"]["levels"])
    print("| concurrency | no speculation tok/s | ngram | EntMTP | EntMTP per round | τ EntMTP | EntMTP's share of step time | step-cost model (fixed / per request / per token ms) | draft nodes kept / drafted |"
          + (" steps the gate skipped / engine steps |" if gated else ""))
    print("|---:|---:|---:|---:|---|---:|---:|---|---:|" + ("---:|" if gated else ""))
    rows = {(r["concurrency"], r["method"]): r for r in results["table"]}
    for c in sorted({r["concurrency"] for r in results["table"]}):
        base = rows.get((c, "vllm"))
        ngram, ent = rows.get((c, "ngram")), rows.get((c, "entmtp"))
        per_round = []
        for entry in rounds:
            t = {(r["concurrency"], r["method"]): r for r in entry["table"]}
            if (c, "entmtp") in t and t[(c, "entmtp")]["tps_ratio"]:
                per_round.append(f"{t[(c, 'entmtp')]['tps_ratio']:.3f}")
        level = next(lv for lv in results["runs"]["entmtp"]["levels"] if lv["concurrency"] == c)
        extra = (level.get("acceptance") or {}).get("entmtp") or {}
        cost = extra.get("step_cost_ms") or {}
        kept = extra.get("drafted_nodes")
        cut = extra.get("budget_cut_nodes")
        fmt = lambda r: f"{r['tps_ratio']:.3f}×" if r and r["tps_ratio"] else "–"  # noqa: E731
        share = ent.get("overhead_share") if ent else None
        print(
            f"| {c} | {base['output_tokens_per_s']:.2f} | {fmt(ngram)} | **{fmt(ent)}** | {', '.join(per_round)} | "
            f"{(ent or {}).get('mean_acceptance_length') or 0:.2f} | {'–' if share is None else f'{100 * share:.1f}%'} | "
            f"{cost.get('fixed', 0):.1f} / {cost.get('per_request', 0):.2f} / {cost.get('per_token', 0):.2f} | "
            f"{kept or 0:.0f} / {(kept or 0) + (cut or 0):.0f} |"
            + (f" {extra.get('gate_skips') or 0:.0f} / {extra.get('steps') or 0:.0f} |" if gated else "")
        )
    print()


if __name__ == "__main__":
    for name in sys.argv[1:] or [p.parent for p in sorted(HERE.glob("*/compare.json"))]:
        table(Path(name))
