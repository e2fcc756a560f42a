"""With EntMTP's packed CPU matrix multiply in vLLM (`ENTMTP_CPU_GEMM=packed`), greedy output
through EntMTP equals vLLM's own greedy output with the same matrix multiply, and the engine's
linear layers and the draft heads' really ran on it.

24 chat prompts (MT-bench + GSM8K) in one batch, the shipped heads and the default bank.
"""

from __future__ import annotations

import pytest

from _vllm_engine import MAX_TOKENS, assert_all_equal, generate_ids, greedy_params, make_llm, run_reference, stats

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

PACKED = {"ENTMTP_CPU_GEMM": "packed"}


@pytest.fixture(scope="module")
def llm(model_path, heads_folder):
    from entmtp_vllm.cpu_gemm.build import CpuGemmUnavailable, load_library

    try:
        load_library()
    except CpuGemmUnavailable as exc:
        pytest.skip(f"packed CPU matrix multiply unavailable: {exc}")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("ENTMTP_CPU_GEMM", "packed")
        engine = make_llm(model_path, {"heads": heads_folder})
    yield engine
    del engine


def test_the_layers_run_on_the_packed_kernel(llm):
    from entmtp_vllm.cpu_gemm.vllm_gemm import packed_layers

    # SmolLM2-135M: 30 layers x (qkv, o, gate_up, down) and the tied LM head
    assert packed_layers() >= 121
    # the shipped 4-layer Hydra heads: 4 x (2 input layers + 3 residual blocks) and the LM head
    assert stats(llm)["head_gemm"] == "packed" and stats(llm)["head_gemm_layers"] == 4 * 5 + 1


def test_greedy_equals_vllm_without_speculation_on_the_same_kernel(request, llm, model_path, chat_prompts):
    reference = run_reference(request, {"model": model_path, "prompts": chat_prompts, "max_tokens": MAX_TOKENS}, PACKED)
    got = generate_ids(llm, chat_prompts, greedy_params())
    assert_all_equal(got, reference)
    assert stats(llm)["verified"] > 0
