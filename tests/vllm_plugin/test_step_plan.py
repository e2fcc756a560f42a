"""Tests for entmtp_vllm/vllm_plugin/step_plan.py: vLLM's sampling parameters as the core's."""

from __future__ import annotations

import pytest

pytest.importorskip("vllm")

from vllm import SamplingParams as VllmSamplingParams  # noqa: E402

from entmtp_vllm.config import SamplingParams  # noqa: E402
from entmtp_vllm.vllm_plugin.step_plan import core_params, unsupported  # noqa: E402


def test_core_params_read_temperature_top_k_and_top_p() -> None:
    assert core_params(None) == SamplingParams() and core_params(None).greedy
    assert core_params(VllmSamplingParams(temperature=0.0, top_k=5)) == SamplingParams()
    params = core_params(VllmSamplingParams(temperature=0.7, top_k=40, top_p=0.9))
    assert params == SamplingParams(temperature=0.7, top_k=40, top_p=0.9)
    assert core_params(VllmSamplingParams(temperature=0.7, top_k=-1)).top_k == 0  # vLLM's "all tokens"


def test_core_params_share_one_value_per_setting() -> None:
    """Read for every request every step: one frozen value per setting, not a new model each time."""
    first = core_params(VllmSamplingParams(temperature=0.7, top_p=0.9))
    assert core_params(VllmSamplingParams(temperature=0.7, top_p=0.9)) is first
    assert core_params(VllmSamplingParams(temperature=0.8, top_p=0.9)) is not first
    assert core_params(None) is core_params(VllmSamplingParams(temperature=0.0))
    with pytest.raises(Exception):
        first.temperature = 1.0  # frozen: sharing it is safe


def test_min_p_and_logit_bias_stay_on_the_tree_path_penalties_do_not() -> None:
    served = VllmSamplingParams(temperature=0.8, top_k=10, top_p=0.9, min_p=0.1, logit_bias={3: 1.5}, seed=4)
    assert unsupported(served) == []
    assert unsupported(served, "typical") == ["min_p under typical acceptance"]
    penalised = VllmSamplingParams(temperature=0.8, repetition_penalty=1.2, bad_words=["x"], logprobs=1, min_tokens=2)
    assert unsupported(penalised) == ["repetition_penalty", "min_tokens", "allowed_token_ids/bad_words", "logprobs"]
