"""The EntMTP model runners: `TreeRunnerMixin` over each platform's vLLM V1 runner.

- `EntMTPCPUModelRunner` (over `CPUModelRunner`): the `CPU_ATTN` tree backend keeps the tree
  rows' fresh K/V, and compaction re-writes the accepted ones through vLLM's own cache op.
- `EntMTPGPUModelRunner` (over `GPUModelRunner`, with `KernelCompaction`): compaction is one
  `compact_kv` Triton launch over every layer's cache, in place, on the layout of the running
  attention backend.

Everything else (planning, positions, verification, drafting) is the mixin's, shared.
"""

from __future__ import annotations

import functools

import numpy as np
import torch

from vllm.v1.worker.cpu_model_runner import CPUModelRunner
from vllm.v1.worker.gpu_model_runner import GPUModelRunner

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
        from entmtp_vllm.vllm_plugin.attention import compact_kv_cpu

        moves = [(i, node, j) for i, path in paths.items() for j, node in enumerate(path) if node != j]
        sources = [plan.trees[i].capture_start + node for i, node, _ in moves]
        compact_kv_cpu(
            plan.tree_step,
            torch.tensor(sources, dtype=torch.long),
            torch.from_numpy(path_slots(self, plan, [(i, j) for i, _, j in moves])),
        )


class KernelCompaction:
    """The CUDA path's start-up check and compaction, mixed in before `TreeRunnerMixin`: the
    attention backend must be an EntMTP CUDA tree backend (`gpu_attention.py`), and compaction
    is one `compact_kv` Triton launch over every layer's `(blocks, Hkv, block_size, 2 * D)`
    cache, in place. Used by `EntMTPGPUModelRunner`; the tests also put it over
    `CPUModelRunner` to run this code path in a CPU engine with vLLM's Triton attention and the
    kernels under the Triton interpreter (`tests/vllm_plugin/_triton_interpreter.py`)."""

    def _entmtp_check_backend(self) -> None:
        from entmtp_vllm.vllm_plugin.gpu import check_tree_backend

        for groups in self.attn_groups:
            for group in groups:
                check_tree_backend(group.backend)

    def _entmtp_compact(self, plan: StepPlan, paths: dict[int, list[int]]) -> None:
        from entmtp_vllm.vllm_plugin.gpu import compact_kv_gpu, kernel_block_table

        requests = sorted(paths)  # whole paths, root first: the kernel skips nodes already in place
        block_table = self.input_batch.block_table[0]
        table = block_table.get_device_tensor(plan.num_reqs)
        rows = torch.tensor(requests, dtype=torch.long, device=table.device)
        kernel_blocks = self.kv_caches[0].shape[2]  # (blocks, Hkv, block_size, 2 * D)
        compact_kv_gpu(
            self.kv_caches, [paths[i] for i in requests], [int(plan.prefix_lens[i]) for i in requests],
            kernel_block_table(table[rows], block_table.block_size, kernel_blocks),
        )


class EntMTPGPUModelRunner(KernelCompaction, TreeRunnerMixin, GPUModelRunner):
    """vLLM's GPU model runner with tree verification for the EntMTP proposer.

    Written against vLLM 0.32.0's `GPUModelRunner`; checked on CPU (construction signature,
    overrides, the kernels under the Triton interpreter, and this class's compaction and
    backend check inside a CPU engine on vLLM's Triton attention), not yet run on a GPU.

    CUDA graphs: vLLM's default `FULL_AND_PIECEWISE` replays a FULL graph (attention inside)
    for uniform decode batches, e.g. every request verifying exactly `num_speculative_tokens`
    drafts, which a bank's largest tree at batch 1 does every step. A replayed graph runs the
    attention it captured, without the tree rows, so the tree masks would be silently skipped.
    A step with tree rows therefore never replays a FULL graph: it runs vLLM's piecewise graphs
    (attention eager, outside them) or none. Steps without tree rows (chains, plain decode)
    keep every mode vLLM chooses."""

    def _determine_batch_execution_and_padding(self, *args, **kwargs):
        plan = self._entmtp_plan
        step = plan.tree_step if plan is not None else None
        capturing = kwargs.get("force_uniform_decode") is not None  # vLLM's dummy / capture runs
        if capturing or step is None or not step.has_tree_rows:
            return super()._determine_batch_execution_and_padding(*args, **kwargs)
        dispatcher = self.cudagraph_dispatcher
        dispatcher.dispatch = functools.partial(_dispatch_without_full_graphs, type(dispatcher).dispatch, dispatcher)
        try:
            return super()._determine_batch_execution_and_padding(*args, **kwargs)
        finally:
            del dispatcher.dispatch  # back to the class's own method


def _dispatch_without_full_graphs(dispatch, dispatcher, *args, valid_modes=None, invalid_modes=None, **kwargs):
    """vLLM's `CudagraphDispatcher.dispatch` with FULL graphs excluded (NONE if nothing else is
    allowed)."""
    from vllm.config.compilation import CUDAGraphMode

    allowed = set(valid_modes or CUDAGraphMode.valid_runtime_modes()) - set(invalid_modes or ()) - {CUDAGraphMode.FULL}
    return dispatch(dispatcher, *args, valid_modes=allowed or {CUDAGraphMode.NONE}, **kwargs)
