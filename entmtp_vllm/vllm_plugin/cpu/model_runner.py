"""`EntMTPCPUModelRunner`: `TreeRunnerMixin` over vLLM's `CPUModelRunner`.

The `CPU_ATTN` tree backend (`cpu/attention.py`) keeps the tree rows' fresh K/V, and compaction
re-writes the accepted ones to their slots next to the prefix through vLLM's own cache op.
Everything else (planning, positions, verification, drafting) is the mixin's, shared with CUDA.
"""

from __future__ import annotations

import numpy as np
import torch

from vllm.v1.worker.cpu_model_runner import CPUModelRunner

from entmtp_vllm.vllm_plugin.cpu.attention import compact_kv_cpu
from entmtp_vllm.vllm_plugin.step_plan import StepPlan
from entmtp_vllm.vllm_plugin.tree_runner import TreeRunnerMixin


def path_slots(runner, plan: StepPlan, moves: list[tuple[int, int]]) -> np.ndarray:
    """The cache slot of each (request index, position on its path) destination, prefix
    included, from the input batch's block table (host copy)."""
    table = runner.input_batch.block_table[0]
    block_size = table.block_size
    rows = np.array([i for i, _ in moves], dtype=np.int64)
    positions = plan.prefix_lens[rows] + np.array([j for _, j in moves], dtype=np.int64)
    blocks = table.block_table.np[rows, positions // block_size].astype(np.int64)
    return blocks * block_size + positions % block_size


class EntMTPCPUModelRunner(TreeRunnerMixin, CPUModelRunner):
    """vLLM's CPU model runner with tree verification for the EntMTP proposer."""

    _entmtp_captures_kv = True

    def _entmtp_compact(self, plan: StepPlan, paths: dict[int, list[int]]) -> None:
        moves = [(i, node, j) for i, path in paths.items() for j, node in enumerate(path) if node != j]
        sources = [plan.trees[i].capture_start + node for i, node, _ in moves]
        compact_kv_cpu(
            plan.tree_step,
            torch.tensor(sources, dtype=torch.long),
            torch.from_numpy(path_slots(self, plan, [(i, j) for i, _, j in moves])),
        )
