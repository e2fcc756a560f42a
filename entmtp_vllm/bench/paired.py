"""Two methods timed over the same prompts, compared prompt by prompt.

`run_offline` runs every method on every prompt, taking turns, so two of its methods form
pairs: the same prompt, timed a few seconds apart. `paired_speed` turns those pairs into the
numbers a speed claim needs:

- `ratio`: the method's tok/s over the baseline's tok/s, both over all shared prompts (> 1: faster);
- `ratio_ci95`: a 95% interval of that ratio, by resampling prompts (percentile bootstrap,
  fixed seed): how far another draw of prompts of the same kind could move it;
- `per_prompt_mean` and `per_prompt_ci95`: the mean of the per-prompt tok/s ratios and the
  half-width of its normal 95% interval.

Rates, not times: in bfloat16 two tree shapes may end a prompt's greedy output at different
lengths, so each side is tokens over seconds.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from entmtp_vllm.errors import EntMTPError

RESAMPLES = 4000
"""Bootstrap resamples of the prompts behind `ratio_ci95`."""


def paired_speed(method: dict[str, Any], baseline: dict[str, Any], resamples: int = RESAMPLES,
                 seed: int = 0) -> dict[str, Any]:
    """`method` against `baseline`: two method summaries of one `run_offline` result (their
    `prompts` rows are matched by id, in any order)."""
    base = {r["id"]: r for r in baseline["prompts"]}
    pairs = [(base[r["id"]], r) for r in method["prompts"]
             if r["id"] in base and r["time_s"] > 0 and base[r["id"]]["time_s"] > 0]
    if not pairs:
        raise EntMTPError("paired_speed: the two methods share no timed prompt")
    tokens = np.array([[b["num_tokens"], m["num_tokens"]] for b, m in pairs], dtype=float)  # [P, 2]
    seconds = np.array([[b["time_s"], m["time_s"]] for b, m in pairs], dtype=float)
    rates = tokens / seconds
    ratios = rates[:, 1] / rates[:, 0]
    n = len(pairs)
    totals = tokens.sum(0) / seconds.sum(0)
    interval = None
    if n > 1:
        picks = np.random.default_rng(seed).integers(0, n, size=(resamples, n))
        drawn = tokens[picks].sum(1) / seconds[picks].sum(1)  # [R, 2]
        low, high = np.quantile(drawn[:, 1] / drawn[:, 0], [0.025, 0.975])
        interval = [float(low), float(high)]
    spread = float(ratios.std(ddof=1)) if n > 1 else float("nan")
    return {"ratio": float(totals[1] / totals[0]), "ratio_ci95": interval, "per_prompt_mean": float(ratios.mean()),
            "per_prompt_ci95": 1.96 * spread / n**0.5, "prompts": n,
            "faster_prompts": int((ratios > 1).sum())}


def paired_text(vs: dict[str, Any] | None) -> str:
    """`paired_speed` as table text: `ratio [low, high]`."""
    if not vs:
        return "–"
    interval = vs.get("ratio_ci95")
    if not interval:
        return f"{vs['ratio']:.3f}"
    return f"{vs['ratio']:.3f} [{interval[0]:.3f}, {interval[1]:.3f}]"
