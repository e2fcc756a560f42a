"""`SampledRows`: a step's sampled rows processed once per sampling setting, into a kept buffer."""

from __future__ import annotations

import pytest
import torch

from entmtp_vllm.config import SamplingParams
from entmtp_vllm.sampling import processed_probs
from entmtp_vllm.vllm_plugin.sampled_rows import SampledRows

T07 = SamplingParams(temperature=0.7)
T1_TOPK = SamplingParams(temperature=1.0, top_k=5)
GREEDY = SamplingParams()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_every_request_gets_its_rows_processed_under_its_own_setting(dtype: torch.dtype) -> None:
    """Requests 0 and 2 share a setting but their rows are not contiguous (1 sits between, with
    another setting); request 3 is greedy and absent. Each result equals `processed_probs` of the
    request's own rows."""
    logits = (torch.randn(9, 300, generator=torch.Generator().manual_seed(1)) * 3).to(dtype)
    params = [T07, T1_TOPK, T07, GREEDY]
    ranges = {0: (0, 3), 1: (3, 4), 2: (4, 7)}
    rows = SampledRows()
    out = rows.compute(logits, ranges, params)
    assert set(out) == {0, 1, 2}
    for i, (lo, hi) in ranges.items():
        assert out[i].shape == (hi - lo, 300) and out[i].dtype == torch.float32
        assert torch.allclose(out[i], processed_probs(logits[lo:hi], params[i]), atol=1e-7)


def test_the_buffer_is_kept_and_grows_only_when_a_step_needs_more_rows() -> None:
    logits = torch.randn(12, 64)
    rows = SampledRows()
    first = rows.compute(logits, {0: (0, 4)}, [T07])[0]
    again = rows.compute(logits, {0: (2, 5), 1: (5, 6)}, [T07, T07])  # contiguous: read in place
    assert again[0].data_ptr() == first.data_ptr()  # same buffer, no new [rows, V] tensor
    assert torch.allclose(again[1], processed_probs(logits[5:6], T07))
    grown = rows.compute(logits, {0: (0, 12)}, [T07])[0]
    assert grown.shape == (12, 64) and torch.allclose(grown, processed_probs(logits, T07))
    assert rows.compute(logits, {}, [T07]) == {}
