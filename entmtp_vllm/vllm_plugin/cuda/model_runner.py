"""`EntMTPGPUModelRunner`: `KernelCompaction` + `TreeRunnerMixin` over vLLM's `GPUModelRunner`.

Compaction is one `compact_kv` Triton launch over every layer's cache, in place, on the layout of
the running attention backend; everything else (planning, positions, verification, drafting) is
the mixin's, shared with the CPU runner.
"""

from __future__ import annotations

import functools

import torch

from vllm.v1.worker.gpu_model_runner import GPUModelRunner

from entmtp_vllm.vllm_plugin.cuda.kernels import check_tree_backend, compact_kv_gpu, kernel_block_table
from entmtp_vllm.vllm_plugin.step_plan import StepPlan
from entmtp_vllm.vllm_plugin.tree_runner import TreeRunnerMixin


class KernelCompaction:
    """The CUDA path's start-up check and compaction, mixed in before `TreeRunnerMixin`: the
    attention backend must be an EntMTP CUDA tree backend (`gpu_attention.py`), and compaction
    is one `compact_kv` Triton launch over every layer's `(blocks, Hkv, block_size, 2 * D)`
    cache, in place. Used by `EntMTPGPUModelRunner`; the tests also put it over
    `CPUModelRunner` to run this code path in a CPU engine with vLLM's Triton attention and the
    kernels under the Triton interpreter (`tests/vllm_plugin/_triton_interpreter.py`)."""

    def _entmtp_check_backend(self) -> None:
        for groups in self.attn_groups:
            for group in groups:
                check_tree_backend(group.backend)

    def _entmtp_compact(self, plan: StepPlan, paths: dict[int, list[int]]) -> None:
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
