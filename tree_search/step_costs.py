"""Per-tree decode-step cost, measured in one engine run that draws a random tree at every step.

calibrate predicts a policy's tok/s as tokens / (prefill + Σ step cost of the tree chosen at each
step). Taking those costs from `entmtp search throughput`, where each tree is timed in its own
generations, compares generations made seconds to minutes apart on a shared CPU. On a small model
the trees of a bank differ by a few milliseconds per step, about as much as such timings drift:
on SmolLM2 (mt_bench, bf16) the throughput run had `n8` at 83.5 ms and `n16` at 88.7 ms per step,
this probe 77.6 ± 0.4 and 93.2 ± 0.6. A sweep on such costs picks policies, and a best static
tree, for differences that are not there. The probe is precise, not exact: its step times still
differed from long static runs by up to ~2.5 ms (docs/search/README.md).

Here the reference engine decodes the calibration prompts with a `RandomTreePolicy`: every step
draws its tree (seeded), so all trees meet the same context lengths, machine load and caches.
A step's cost is its `StepRecord.time_s` (features, policy, draft, verify, accept, KV compaction),
averaged per tree, with its standard error; the prefill cost per prompt token comes from the
same generations.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from typing import Any, Callable

from entmtp_vllm.errors import EntMTPError
from entmtp_vllm.policies import Policy
from entmtp_vllm.tree import Tree

STEP_COSTS_FILE = "step_costs.json"


class RandomTreePolicy(Policy):
    """A uniformly random bank index at every step (seeded); reads no feature."""

    def __init__(self, num_trees: int, seed: int = 0) -> None:
        super().__init__(num_trees, 0)
        self.rng = random.Random(seed)

    @property
    def reads_verifier(self) -> bool:
        return False

    @property
    def heads_read(self) -> int:
        return 0

    def _next(self, current: int, s: float) -> int:
        return self.rng.randrange(self.num_trees)


def probe_step_costs(bench_cfg, trees: Sequence[tuple[str, Tree]], seed: int = 0, progress: bool = True,
                     log: Callable[[str], None] = print) -> dict[str, Any]:
    """Decode `bench_cfg`'s prompts (its model, heads, dtype, threads, max_tokens; greedy) with a
    random tree of `trees` per step; returns per-tree step costs (ms), their standard errors and
    the prefill cost per prompt token. One warm-up generation first, excluded."""
    import torch
    from tqdm import tqdm

    from entmtp_vllm.bench.offline import bench_prompts, encode_prompts
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
    bank = TopologyBank([t for _, t in trees], [n for n, _ in trees])
    engine = ReferenceEngine(model, tokenizer, drafter, bank, RandomTreePolicy(len(trees), seed))
    encoded = encode_prompts(bench_cfg, tokenizer, prompts)
    for ids in encoded:  # fail before any timing
        engine.check_request(ids, bench_cfg.max_tokens, "tree", "greedy")
    log(f"step-cost probe: {len(trees)} trees, a random one per step, on {len(prompts)} prompts, {bench_cfg.dtype}")
    greedy = SamplingParams()
    engine.generate(encoded[0], min(bench_cfg.max_tokens, 16), sampling=greedy, acceptance="greedy")  # warm-up
    times: dict[str, list[float]] = {name: [] for name, _ in trees}
    prefill_s = prompt_tokens = 0.0
    for ids in tqdm(encoded, desc="step costs", unit="prompt", disable=not progress):
        gen = engine.generate(ids, bench_cfg.max_tokens, sampling=greedy, acceptance="greedy")
        for step in gen.steps:
            times[step.tree_name].append(step.time_s)
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
        raise EntMTPError(f"the step-cost probe drew tree(s) {', '.join(unmeasured)} fewer than twice: "
                          "give it more prompts (--cost-prompts)")
    return {"trees": rows, "prefill_ms_per_token": 1000 * prefill_s / max(prompt_tokens, 1),
            "prompts": len(prompts), "seed": seed, "dtype": bench_cfg.dtype}
