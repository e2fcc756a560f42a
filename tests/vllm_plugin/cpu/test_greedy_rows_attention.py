"""Greedy output through EntMTP with its CPU rows attention taking every request it can
(`ENTMTP_CPU_ROWS_ATTENTION=all`: these prompts are shorter than `on`'s context threshold) equals vLLM's own greedy output (float32), trees included: the requests that verify drafts (and
short prefill chunks) take the kernel, the others vLLM's op, in the same steps.

24 chat prompts (MT-bench + GSM8K, mixed lengths) in one batch; one engine for the module.
"""

from __future__ import annotations

import pytest
import torch

from _vllm_engine import assert_all_equal, generate_ids, greedy_params, make_llm, stats
from entmtp_vllm.config import CPU_ROWS_ATTENTION
from entmtp_vllm.cpu_attention import rows

pytestmark = [pytest.mark.vllm, pytest.mark.slow]


@pytest.fixture(scope="module")
def calls():
    """Every `rows.prepare` call of the module's engine (one per step that takes the kernel)."""
    reason = rows.unsupported(torch.float32, 64, 128) or rows.load_library()[1]
    if reason:
        pytest.skip(reason)
    seen: list[int] = []
    prepare = rows.prepare

    def counting(row_start, *args, **kwargs):
        seen.append(len(row_start))
        return prepare(row_start, *args, **kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(CPU_ROWS_ATTENTION.env, "all")
        patch.setattr(rows, "prepare", counting)
        yield seen


@pytest.fixture(scope="module")
def llm(calls, model_path, heads_folder):
    engine = make_llm(model_path, {"heads": heads_folder})
    yield engine
    del engine


def test_greedy_equals_vllm_without_speculation(llm, calls, chat_prompts, reference_ids):
    got = generate_ids(llm, chat_prompts, greedy_params())
    assert_all_equal(got, reference_ids)
    assert stats(llm)["verified"] > 0
    assert calls and max(calls) >= 2  # the kernel took steps, several requests at once
