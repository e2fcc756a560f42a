"""How often the step budget called the second head once it drafted depth by depth (issue #19):
`budget_stats.py` (one in-process vLLM engine, EntMTP's defaults, PROMPTS MT-bench test prompts,
SEQS at a time) with every step plan counted by its head trees' depths. Prints budget_stats.py's
JSON line, then one line `HEAD_LEVELS {...}`:

- head_steps: steps whose plan had a tree with head nodes (the gate let the heads run)
- head_requests: those trees (one per request and step)
- depth2_drafted: of them, the trees drafted below depth 1 (the second head ran for them)
- steps_with_head2: head steps that called the second head at all
- kept_depth1 / kept_depth2: trees whose plan kept a depth-1 / a depth-2 node

    OMP_NUM_THREADS=2 python docs/results/serving/epyc_depth/head_levels.py PROMPTS SEQS
"""

from __future__ import annotations

import atexit
import collections
import json
import runpy
import sys
from pathlib import Path

from entmtp_vllm import step_planner

BUDGET_STATS = Path(__file__).resolve().parents[1] / "epyc_lookup_rates" / "budget_stats.py"
counts: collections.Counter = collections.Counter()
plan = step_planner.StepPlanner.plan


def counted(self, drafts, trees, lookups, batch_size, spent):
    result = plan(self, drafts, trees, lookups, batch_size, spent)
    heads = []  # per head tree: the depth of its deepest kept node and of its deepest drafted node
    for buffers, kept, draft in zip(trees, result.kept, drafts):
        if buffers.head_depth:
            depths = [len(node) for node in buffers.nodes]
            heads.append((max(depths[: kept + 1]), max(depths[: len(draft.token_probs)])))
    if heads:
        counts["head_steps"] += 1
        counts["head_requests"] += len(heads)
        counts["depth2_drafted"] += sum(drafted >= 2 for _, drafted in heads)
        counts["steps_with_head2"] += any(drafted >= 2 for _, drafted in heads)
        counts["kept_depth1"] += sum(kept >= 1 for kept, _ in heads)
        counts["kept_depth2"] += sum(kept >= 2 for kept, _ in heads)
    return result


step_planner.StepPlanner.plan = counted
atexit.register(lambda: print("HEAD_LEVELS " + json.dumps(dict(counts)), flush=True))
sys.argv = [str(BUDGET_STATS)] + sys.argv[1:]
runpy.run_path(str(BUDGET_STATS), run_name="__main__")
