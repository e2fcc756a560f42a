"""Per-tree decode-step cost: every tree decodes the calibration prompts statically, side by side.

calibrate predicts a policy's tok/s as tokens / (prefill + Σ step cost of the tree chosen at each
step). On a small model the trees of a bank differ by a few milliseconds per step, about as much
as timings drift on a shared CPU, where slow spells last seconds. So the costs come from one run in
which each tree has its own engine (a static policy) and the engines decode every prompt in turns,
one step each (`bench.timing.decode_in_turns`): all trees meet the same machine load within a
fraction of a second, each at the context lengths it reaches itself.

A step's cost is its `StepRecord.time_s` (features, policy, draft, verify, accept, KV compaction),
averaged per tree, with its standard error over steps; the prefill cost per prompt token comes
from the same generations. On gsm8k (SmolLM2-135M, bf16, the 8 calibration prompts, nothing else
running) this gave `n4` at 1.098× `n2`'s step time, like 1.097× in a 16-prompt run of the same
kind on test prompts; with another calibrate sharing the machine it gave 1.110×. The earlier
probe, one engine drawing a random tree at every step, gave 1.121×: enough to turn the choice
of the best static tree (docs/search/README.md).

`CostModel` turns the costs (from this probe, or from `search throughput`'s runs) into a replayed
policy's predicted time and tok/s.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

from entmtp_vllm.errors import EntMTPError
from entmtp_vllm.tree import Tree

if TYPE_CHECKING:
    from tree_search.replay import ReplayResult

STEP_COSTS_FILE = "step_costs.json"


def probe_step_costs(bench_cfg, trees: Sequence[tuple[str, Tree]], progress: bool = True,
                     log: Callable[[str], None] = print) -> dict[str, Any]:
    """Decode `bench_cfg`'s prompts (its model, heads, dtype, threads, max_tokens; greedy) with every
    tree of `trees` as a static tree, the trees taking turns step by step (the order rotating from
    prompt to prompt); returns per-tree step costs (ms), their standard errors and the prefill
    cost per prompt token. One short warm-up generation per tree first, excluded."""
    import torch
    from tqdm import tqdm

    from entmtp_vllm.bench.timing import bench_prompts, decode_in_turns, encode_prompts, turn_order
    from entmtp_vllm.config import SamplingParams
    from entmtp_vllm.engine.loading import load_drafter, load_target
    from entmtp_vllm.engine.reference import ReferenceEngine
    from entmtp_vllm.topology import TopologyBank

    if len(trees) == 0:
        raise EntMTPError("the step-cost probe needs at least one tree")
    torch.set_num_threads(bench_cfg.threads)
    prompts = bench_prompts(bench_cfg)
    model, tokenizer = load_target(bench_cfg.model, bench_cfg.dtype)
    drafter = load_drafter(bench_cfg.heads, model)
    engines = {name: ReferenceEngine(model, tokenizer, drafter.fork(), TopologyBank([tree], [name]))
               for name, tree in trees}
    names = list(engines)
    encoded = encode_prompts(bench_cfg, tokenizer, prompts)
    for ids in encoded:  # fail before any timing
        engines[names[0]].check_request(ids, bench_cfg.max_tokens, "tree", "greedy")
    log(f"step-cost probe: {len(trees)} static trees decoding side by side, a step each per turn, "
        f"on {len(prompts)} prompts, {bench_cfg.dtype}")
    greedy = SamplingParams()
    for engine in engines.values():  # warm-up
        engine.generate(encoded[0], min(bench_cfg.max_tokens, 16), sampling=greedy, acceptance="greedy")
    times: dict[str, list[float]] = {name: [] for name in names}
    prefill_s = prompt_tokens = 0.0
    for index, ids in enumerate(tqdm(encoded, desc="step costs", unit="prompt", disable=not progress)):
        gens = decode_in_turns({name: engines[name].decode(ids, bench_cfg.max_tokens, sampling=greedy,
                                                           acceptance="greedy") for name in turn_order(names, index)})
        for name, gen in gens.items():
            times[name].extend(step.time_s for step in gen.steps)
            prefill_s += gen.prefill_time_s
            prompt_tokens += gen.prompt_tokens
    rows = {}
    for name, values in times.items():
        n = len(values)
        mean = sum(values) / n if n else None
        se = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1) / n) if n > 1 else None
        rows[name] = {"step_ms": None if mean is None else 1000 * mean, "se_ms": None if se is None else 1000 * se,
                      "steps": n}
    unmeasured = [name for name, row in rows.items() if row["steps"] < 2]
    if unmeasured:
        raise EntMTPError(f"tree(s) {', '.join(unmeasured)} took fewer than two decode steps in the step-cost probe: "
                          "give it more prompts (--cost-prompts) or more tokens (--max-tokens)")
    return {"trees": rows, "prefill_ms_per_token": 1000 * prefill_s / max(prompt_tokens, 1),
            "prompts": len(prompts), "method": "static trees, a decode step each per turn", "dtype": bench_cfg.dtype}


@dataclass
class CostModel:
    """Measured costs: seconds per decode step of each tree, prefill seconds per prompt token."""

    step_s: dict[str, float]
    prefill_s_per_token: float
    source: str = ""

    def seconds(self, result: ReplayResult) -> float:
        missing = [name for name, n in result.tree_steps.items() if n and name not in self.step_s]
        if missing:
            raise EntMTPError(f"no measured step time for tree {missing[0]!r}: time it with `entmtp search throughput`")
        decode = sum(n * self.step_s[name] for name, n in result.tree_steps.items() if n)
        return self.prefill_s_per_token * result.prompt_tokens + decode

    def tokens_per_second(self, result: ReplayResult) -> float:
        seconds = self.seconds(result)
        return result.tokens / seconds if seconds > 0 else 0.0


def cost_model_from_throughput(throughput: dict[str, Any], trees: Sequence[tuple[str, Tree]]) -> CostModel:
    """Step times of `trees` (matched to the timed trees by shape) from a throughput.json."""
    by_shape = {tuple(map(tuple, Tree.from_choices(r["choices"]).choices)): r for r in throughput["rows"]}
    step_s = {}
    for name, tree in trees:
        row = by_shape.get(tuple(map(tuple, tree.choices)))
        if row is not None and row["step_ms"]:
            step_s[name] = row["step_ms"] / 1000.0
    rows = [throughput["ar"], *throughput["rows"]]
    prefill = sum(r["prefill_s"] for r in rows) / max(sum(r["prompt_tokens"] for r in rows), 1)
    return CostModel(step_s, prefill, throughput.get("outputs", {}).get("json", ""))


def cost_model_from_probe(step_costs: dict[str, Any]) -> CostModel:
    """Step times per tree and the prefill time per prompt token from a `probe_step_costs` result."""
    return CostModel({name: row["step_ms"] / 1000.0 for name, row in step_costs["trees"].items()},
                     step_costs["prefill_ms_per_token"] / 1000.0, STEP_COSTS_FILE)
