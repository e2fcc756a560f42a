"""CUDA graphs and the GPU runner, against vLLM 0.32's own dispatcher (on CPU, no graph runs).

vLLM's default `FULL_AND_PIECEWISE` replays a FULL graph (attention inside it) for a uniform decode
batch; a replay would skip the tree rows, which EntMTP computes in Python inside attention. Steps
with tree rows must dispatch to piecewise graphs (attention eager) or none; other steps keep
vLLM's choice.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

pytestmark = pytest.mark.vllm

pytest.importorskip("vllm")

from vllm.config import CompilationConfig  # noqa: E402
from vllm.config.compilation import CompilationMode, CUDAGraphMode  # noqa: E402
from vllm.v1.cudagraph_dispatcher import CudagraphDispatcher  # noqa: E402
from vllm.v1.worker.gpu_model_runner import GPUModelRunner  # noqa: E402

from entmtp_vllm.vllm_plugin.cuda.model_runner import EntMTPGPUModelRunner, _dispatch_without_full_graphs  # noqa: E402

DRAFTS = 5
QUERY = DRAFTS + 1
UNIFORM = dict(num_tokens=2 * QUERY, num_reqs=2, num_scheduled_tokens_np=np.array([QUERY, QUERY]),
               max_num_scheduled_tokens=QUERY)
MIXED = dict(num_tokens=QUERY + 3, num_reqs=2, num_scheduled_tokens_np=np.array([QUERY, 3]),
             max_num_scheduled_tokens=QUERY)


def dispatcher() -> CudagraphDispatcher:
    """vLLM's dispatcher as a CUDA engine with 5 speculative tokens sets it up."""
    compilation = CompilationConfig(
        mode=CompilationMode.VLLM_COMPILE, cudagraph_mode=CUDAGraphMode.FULL_AND_PIECEWISE,
        cudagraph_capture_sizes=[QUERY, 2 * QUERY, 4 * QUERY], max_cudagraph_capture_size=4 * QUERY,
    )
    compilation.set_splitting_ops_for_v1(all2all_backend="naive")
    config = SimpleNamespace(
        compilation_config=compilation, num_speculative_tokens=DRAFTS, lora_config=None,
        scheduler_config=SimpleNamespace(max_num_seqs=8), parallel_config=SimpleNamespace(data_parallel_size=1),
        observability_config=SimpleNamespace(cudagraph_metrics=False),
    )
    found = CudagraphDispatcher(config)
    found.initialize_cudagraph_keys(CUDAGraphMode.FULL_AND_PIECEWISE, QUERY)
    return found


def runner(cls, tree_rows: bool | None):
    """A runner with just what vLLM's `_determine_batch_execution_and_padding` reads; its last
    plan has tree rows (True), only chains (False), or there is none (None)."""
    made = cls.__new__(cls)
    made.cudagraph_dispatcher = dispatcher()
    made.uniform_decode_query_len = QUERY
    made.vllm_config = made.cudagraph_dispatcher.vllm_config
    made.model_config = SimpleNamespace(is_encoder_decoder=False)
    made.input_batch = SimpleNamespace(lora_id_to_lora_request={})
    step = None if tree_rows is None else SimpleNamespace(has_tree_rows=tree_rows)
    made._entmtp_plan = None if tree_rows is None else SimpleNamespace(tree_step=step)
    return made


def mode(made, batch: dict, **extra) -> CUDAGraphMode:
    return made._determine_batch_execution_and_padding(**batch, **extra)[0]


def test_vllm_replays_a_full_graph_for_uniform_decode():
    """The hazard: the stock runner replays FULL graphs for uniform spec-decode batches."""
    assert mode(runner(GPUModelRunner, None), UNIFORM) == CUDAGraphMode.FULL
    assert mode(runner(GPUModelRunner, None), MIXED) == CUDAGraphMode.PIECEWISE


@pytest.mark.parametrize("batch", [UNIFORM, MIXED], ids=["uniform", "mixed"])
def test_steps_with_tree_rows_never_replay_a_full_graph(batch):
    made = runner(EntMTPGPUModelRunner, tree_rows=True)
    assert mode(made, batch) == CUDAGraphMode.PIECEWISE
    assert "dispatch" not in vars(made.cudagraph_dispatcher)  # the class's own method again


@pytest.mark.parametrize("tree_rows", [False, None], ids=["chains only", "no plan"])
def test_other_steps_keep_vllms_choice(tree_rows):
    assert mode(runner(EntMTPGPUModelRunner, tree_rows), UNIFORM) == CUDAGraphMode.FULL


def test_capture_runs_keep_full_graphs():
    """vLLM's capture / dummy runs pass force_uniform_decode: a stale plan must not change them."""
    made = runner(EntMTPGPUModelRunner, tree_rows=True)
    assert mode(made, UNIFORM, force_uniform_decode=True) == CUDAGraphMode.FULL


def test_full_only_becomes_no_graph():
    """A dispatch restricted to FULL (data-parallel sync) runs without a graph instead."""
    found = dispatcher()
    got, _ = _dispatch_without_full_graphs(CudagraphDispatcher.dispatch, found, num_tokens=2 * QUERY,
                                           uniform_decode=True, valid_modes={CUDAGraphMode.FULL})
    assert got == CUDAGraphMode.NONE
