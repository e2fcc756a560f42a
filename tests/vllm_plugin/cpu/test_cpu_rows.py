"""Which requests of a step take EntMTP's rows attention on vLLM's CPU backend (`cpu/rows.py`).

The plans are built from stand-ins for vLLM's per-step metadata and the layer (the fields the
plan reads); that the served path is right end to end is shown by the greedy-equality tests
(test_greedy_*.py), which run it on vLLM's CPU engine in float32."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from entmtp_vllm.config import CPU_ROWS_ATTENTION
from entmtp_vllm.cpu_attention import rows
from entmtp_vllm.errors import EntMTPError
from entmtp_vllm.vllm_plugin.cpu import rows as cpu_rows
from entmtp_vllm.vllm_plugin.tree_step import TREE_STEP_ATTR, TreeStep

HEADS, KV_HEADS, HEAD_DIM, BLOCK = 9, 3, 64, 128


def _impl():
    return SimpleNamespace(
        num_heads=HEADS, head_size=HEAD_DIM, scale=HEAD_DIM**-0.5, sliding_window=-1, alibi_slopes=None, sinks=None,
        logits_soft_cap=None, is_fp8_kv_cache=False, kv_cache_dtype="auto",
    )


def _metadata(counts: list[int], contexts: list[int], step: TreeStep | None = None, entmtp: bool = True):
    starts = torch.tensor([0, *torch.cumsum(torch.tensor(counts), 0).tolist()], dtype=torch.int32)
    seq_lens = torch.tensor([c + n for c, n in zip(contexts, counts)], dtype=torch.int32)
    blocks = max(-(-int(s) // BLOCK) for s in seq_lens)
    table = torch.arange(len(counts) * blocks, dtype=torch.int32).view(len(counts), blocks)
    metadata = SimpleNamespace(
        query_start_loc=starts, seq_lens=seq_lens, block_table=table, num_actual_tokens=int(starts[-1]), causal=True
    )
    if entmtp:
        setattr(metadata, TREE_STEP_ATTR, step)
    return metadata, torch.zeros(len(counts) * blocks, KV_HEADS, BLOCK, 2 * HEAD_DIM)


def _tree_step(batch_row: int, start: int, parents: list[int]) -> TreeStep:
    n = len(parents)
    mask = torch.zeros(1, n, n, dtype=torch.bool)
    for node in range(n):
        walk = node
        while walk >= 0:
            mask[0, node, walk], walk = True, parents[walk]
    return TreeStep(
        batch_rows=torch.tensor([batch_row]), token_rows=torch.arange(start, start + n).view(1, n),
        node_valid=torch.ones(1, n, dtype=torch.bool), tree_mask=mask, num_nodes=torch.tensor([n]),
    )


@pytest.fixture(autouse=True)
def _kernel_here(monkeypatch):
    reason = rows.unsupported(torch.float32, HEAD_DIM, BLOCK) or rows.load_library()[1]
    if reason:
        pytest.skip(reason)
    monkeypatch.setenv(CPU_ROWS_ATTENTION.env, "all")


def test_requests_with_a_few_rows_take_the_kernel_and_the_rest_vllms_op():
    # a decode row, a root with 3 drafts, a prefill chunk longer than the kernel takes, a short prefill
    metadata, cache = _metadata([1, 4, 100, 20], [300, 200, 0, 0])
    plan = cpu_rows.build_plan(_impl(), SimpleNamespace(isa="vec"), metadata, cache)
    assert plan.row_start.tolist() == [1, 105] and plan.row_count.tolist() == [4, 20]
    assert plan.seq_lens.tolist() == [204, 20] and plan.visible is None  # no tree: causal
    assert plan.plain_rows.tolist() == [0, *range(5, 105)]
    assert plan.plain_query_start.tolist() == [0, 1, 101] and plan.plain_seq_lens.tolist() == [301, 100]
    assert torch.equal(plan.plain_block_table, metadata.block_table[[0, 2]])


def test_tree_rows_get_their_ancestors_and_chains_stay_causal():
    parents = [-1, 0, 0, 1, 2]  # root, two children, a grandchild under each
    metadata, cache = _metadata([3, 5], [50, 60], _tree_step(1, 3, parents))
    plan = cpu_rows.build_plan(_impl(), SimpleNamespace(isa="vec"), metadata, cache)
    assert plan.plain_rows is None
    assert plan.visible[:3].tolist() == [0b1, 0b11, 0b111]
    assert plan.visible[3:].tolist() == [0b00001, 0b00011, 0b00101, 0b01011, 0b10101]


def test_a_64th_row_sees_every_row_before_it():
    metadata, cache = _metadata([64], [10], _tree_step(0, 0, [-1, *range(63)]))  # a 64-node chain as a tree
    plan = cpu_rows.build_plan(_impl(), SimpleNamespace(isa="vec"), metadata, cache)
    assert plan.visible[63].item() == -1 and plan.visible[62].item() == (1 << 63) - 1


def test_on_takes_only_the_requests_with_a_long_context(monkeypatch):
    monkeypatch.setenv(CPU_ROWS_ATTENTION.env, "on")
    least = CPU_ROWS_ATTENTION.min_context
    # drafts at a short context, drafts reaching the threshold with their rows, a long decode row
    metadata, cache = _metadata([3, 4, 1], [least - 10, least - 4, 2 * least])
    plan = cpu_rows.build_plan(_impl(), SimpleNamespace(isa="vec"), metadata, cache)
    assert plan.row_start.tolist() == [3] and plan.seq_lens.tolist() == [least]
    assert plan.plain_rows.tolist() == [0, 1, 2, 7] and plan.plain_seq_lens.tolist() == [least - 7, 2 * least + 1]
    metadata, cache = _metadata([3, 4], [10, least - 5])
    assert cpu_rows.build_plan(_impl(), SimpleNamespace(isa="vec"), metadata, cache) is None  # none that long


@pytest.mark.parametrize("value, expected", [("", None), ("off", None), ("all", 0), ("on", "min_context")])
def test_the_setting_and_its_default(value, expected, monkeypatch):
    monkeypatch.setenv(CPU_ROWS_ATTENTION.env, value)
    if value == "":
        expected = {"off": None, "all": 0, "on": CPU_ROWS_ATTENTION.min_context}[CPU_ROWS_ATTENTION.default]
    elif expected == "min_context":
        expected = CPU_ROWS_ATTENTION.min_context
    assert rows.min_context() == expected
    monkeypatch.setenv(CPU_ROWS_ATTENTION.env, "1")
    with pytest.raises(EntMTPError, match=CPU_ROWS_ATTENTION.env):
        rows.min_context()


@pytest.mark.parametrize(
    "case",
    ["not EntMTP's step", "not turned on", "one row each", "tree too large", "other layout", "sliding window", "fp16"],
)
def test_vllms_op_keeps_the_step(case, monkeypatch):
    impl, layer = _impl(), SimpleNamespace(isa="vec")
    metadata, cache = _metadata([1, 3], [10, 10], entmtp=case != "not EntMTP's step")
    if case == "not turned on":
        monkeypatch.setenv(CPU_ROWS_ATTENTION.env, "off")
    elif case == "one row each":
        metadata, cache = _metadata([1, 1], [10, 10])
    elif case == "tree too large":
        metadata, cache = _metadata([65], [10], _tree_step(0, 0, [-1, *range(64)]))
    elif case == "other layout":
        layer.isa = "amx"
    elif case == "sliding window":
        impl.sliding_window = 4096
    elif case == "fp16":
        cache = cache.half()
    assert cpu_rows.build_plan(impl, layer, metadata, cache) is None


def test_the_plan_is_built_once_per_step():
    metadata, cache = _metadata([2], [10])
    first = cpu_rows.step_plan(_impl(), SimpleNamespace(isa="vec"), metadata, cache)
    assert cpu_rows.step_plan(_impl(), SimpleNamespace(isa="vec"), metadata, torch.empty(0)) is first
