"""Tests for entmtp_vllm/sampling.py: processed distributions and sampling."""

from __future__ import annotations

import pytest
import torch
from scipy.stats import chisquare

from entmtp_vllm.config import SamplingParams
from entmtp_vllm.sampling import greedy_tokens, processed_probs, sample

PROBS = torch.tensor([0.05, 0.5, 0.15, 0.3])
LOGITS = PROBS.log()


def test_greedy_is_one_hot_argmax_with_ties_to_the_lowest_index() -> None:
    logits = torch.tensor([[1.0, 3.0, 3.0, 0.0], [2.0, 0.0, 2.0, 2.0]])
    probs = processed_probs(logits, SamplingParams())
    assert probs.tolist() == [[0.0, 1.0, 0.0, 0.0], [1.0, 0.0, 0.0, 0.0]]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_greedy_tokens_match_argmax_in_the_logits_own_dtype(dtype: torch.dtype) -> None:
    """Same token as argmax in the logits' own dtype: ties (the lower index wins), NaN (counts as
    the maximum), -inf rows, logits rounded coarsely enough that ties are frequent."""
    generator = torch.Generator().manual_seed(0)
    logits = (torch.randn(8, 4096, generator=generator) * 4).to(dtype)
    logits[0, 7] = logits[0, 3000] = logits[0].max() + 1  # a tie: the lower index wins
    logits[1, 99] = logits[1, 5] = float("nan")
    logits[2] = float("-inf")
    logits[3, 10:] = float("-inf")
    logits[4] = logits[4].round()  # many values tied with the maximum
    assert torch.equal(greedy_tokens(logits), logits.argmax(dim=-1))
    assert int(greedy_tokens(logits[0])) == 7
    assert greedy_tokens(logits[1:3]).tolist() == [5, 0]
    for _ in range(50):
        coarse = (torch.randn(5, 300, generator=generator) * 2).round().to(dtype)
        assert torch.equal(greedy_tokens(coarse), coarse.argmax(dim=-1))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("vocab", [49152, 1280, 1000])  # blocks of 512, of 256, none (plain max)
def test_greedy_tokens_by_blocks_equal_argmax(dtype: torch.dtype, vocab: int) -> None:
    """The two-pass blocked argmax against `argmax`: ties within and across blocks, a NaN after the
    maximum's block, the maximum in the last block, no rows, and more than two dimensions."""
    generator = torch.Generator().manual_seed(1)
    logits = (torch.randn(6, vocab, generator=generator) * 3).to(dtype)
    top = logits.max() + 1
    logits[0, 600 % vocab] = logits[0, vocab - 1] = top  # tied across blocks
    logits[1, 2] = logits[1, 3] = top  # tied inside a block
    logits[2, 1] = top
    logits[2, vocab - 5] = float("nan")
    logits[3, vocab - 1] = top
    logits[4] = logits[4].round()
    assert torch.equal(greedy_tokens(logits), logits.argmax(dim=-1))
    assert greedy_tokens(logits[:0]).shape == (0,)
    cube = logits.reshape(2, 3, vocab)
    assert torch.equal(greedy_tokens(cube), cube.argmax(dim=-1))
    columns = logits.t().contiguous().t()  # the same values, not contiguous along the vocabulary
    assert torch.equal(greedy_tokens(columns), logits.argmax(dim=-1))
    for _ in range(20):
        coarse = (torch.randn(4, vocab, generator=generator) * 2).round().to(dtype)
        assert torch.equal(greedy_tokens(coarse), coarse.argmax(dim=-1))


def test_greedy_tokens_of_bfloat16_rows_equal_argmax() -> None:
    """bfloat16 rows of a verification step's width: ties across blocks, +inf, rows with no logit
    above zero (all negative, zeros of both signs, -inf), and NaNs of either sign (set by their
    bits: torch makes every NaN it converts to bfloat16 positive) with a larger payload after the
    first (the first NaN wins)."""
    generator = torch.Generator().manual_seed(2)
    logits = (torch.randn(8, 49152, generator=generator) * 3 + 1).to(torch.bfloat16)
    top = logits.max() + 1
    logits[0, 700] = logits[0, 40000] = top  # tied across blocks: the lower index
    logits[1] = -logits[1].abs() - 0.5  # all negative
    logits[2] = 0.0
    logits[2, :100] = -0.0  # -0.0 first: it ties +0.0, so argmax takes it
    logits[3] = float("-inf")
    logits[3, 30000] = -1.0
    logits[4, 123] = float("inf")
    logits[5] = -logits[5].abs()
    logits[5, 9] = 0.0
    assert torch.equal(greedy_tokens(logits), logits.argmax(dim=-1))
    for first, second in ((0x7FC0, 0x7FC1), (-64, -64)):  # bits: NaNs with a sign of 0 and of 1
        poisoned = logits.clone()
        poisoned.view(torch.int16)[6, 20000] = first
        poisoned.view(torch.int16)[6, 30000] = second  # a larger payload after it: still the first
        assert poisoned[6, 20000].isnan() and poisoned[6, 30000].isnan()
        assert torch.equal(greedy_tokens(poisoned), poisoned.argmax(dim=-1))
        assert int(greedy_tokens(poisoned)[6]) == 20000
    assert torch.equal(greedy_tokens(logits[1:2]), logits[1:2].argmax(dim=-1))


def test_temperature_scales_logits() -> None:
    params = SamplingParams(temperature=0.5)
    assert torch.allclose(processed_probs(LOGITS, params), (LOGITS / 0.5).softmax(-1))
    assert torch.allclose(processed_probs(LOGITS, SamplingParams(temperature=1.0)), PROBS)


def test_top_k_keeps_the_k_largest_and_renormalises() -> None:
    probs = processed_probs(LOGITS, SamplingParams(temperature=1.0, top_k=2))
    assert torch.allclose(probs, torch.tensor([0.0, 0.625, 0.0, 0.375]))


def test_top_k_keeps_ties_with_the_kth_logit() -> None:
    probs = processed_probs(torch.tensor([1.0, 2.0, 1.0, 0.0]), SamplingParams(temperature=1.0, top_k=2))
    assert (probs > 0).tolist() == [True, True, True, False]


def test_top_k_at_least_the_vocabulary_is_disabled() -> None:
    params = SamplingParams(temperature=1.0, top_k=10)
    assert torch.allclose(processed_probs(LOGITS, params), PROBS)


@pytest.mark.parametrize(
    ("top_p", "kept"),
    [
        (0.5, [False, True, False, False]),  # 0.5 alone reaches 0.5
        (0.79, [False, True, False, True]),  # 0.5 + 0.3 reaches 0.79
        (0.81, [False, True, True, True]),
        (0.01, [False, True, False, False]),  # the top token always stays
    ],
)
def test_top_p_keeps_the_smallest_prefix_reaching_p(top_p: float, kept: list[bool]) -> None:
    probs = processed_probs(LOGITS.double(), SamplingParams(temperature=1.0, top_p=top_p))
    assert (probs > 0).tolist() == kept
    assert torch.allclose(probs, PROBS.double() * torch.tensor(kept) / (PROBS.double() * torch.tensor(kept)).sum())


def test_top_k_applies_before_top_p() -> None:
    # top_k = 3 leaves [0.5, 0.15, 0.3] / 0.95; top_p = 0.8 then needs 0.526 + 0.316.
    probs = processed_probs(LOGITS.double(), SamplingParams(temperature=1.0, top_k=3, top_p=0.8))
    assert (probs > 0).tolist() == [False, True, False, True]
    assert torch.allclose(probs.sum(), torch.tensor(1.0, dtype=torch.float64))


def test_rows_are_processed_independently() -> None:
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(5, 11, generator=g)
    params = SamplingParams(temperature=0.7, top_k=6, top_p=0.9)
    batched = processed_probs(logits, params)
    for row in range(5):
        assert torch.allclose(batched[row], processed_probs(logits[row], params))
    assert torch.allclose(batched.sum(-1), torch.ones(5))


def test_half_precision_is_computed_in_float32() -> None:
    probs = processed_probs(LOGITS.half(), SamplingParams(temperature=1.0))
    assert probs.dtype == torch.float32
    assert processed_probs(LOGITS.double(), SamplingParams(temperature=1.0)).dtype == torch.float64


def test_integer_logits_are_refused() -> None:
    with pytest.raises(TypeError):
        processed_probs(torch.tensor([1, 2]), SamplingParams())


def test_sample_is_reproducible_and_follows_probs() -> None:
    draws = [sample(PROBS, torch.Generator().manual_seed(3)) for _ in range(2)]
    assert draws[0] == draws[1]
    g = torch.Generator().manual_seed(1)
    counts = torch.bincount(torch.tensor([sample(PROBS, g) for _ in range(4000)]), minlength=4)
    assert chisquare(counts.tolist(), (PROBS * 4000).tolist()).pvalue > 1e-3


def test_sample_one_hot_and_shape_check() -> None:
    assert sample(torch.tensor([0.0, 0.0, 1.0])) == 2
    with pytest.raises(ValueError, match="1-D"):
        sample(torch.ones(2, 3) / 3)


def test_sample_never_draws_a_zero_and_takes_unnormalised_weights() -> None:
    g = torch.Generator().manual_seed(5)
    weights = torch.tensor([0.0, 3.0, 0.0, 0.0, 1.0, 0.0], dtype=torch.bfloat16)  # sums to 4
    draws = torch.tensor([sample(weights, g) for _ in range(4000)])
    assert set(draws.tolist()) == {1, 4}
    counts = torch.bincount(draws, minlength=6)[[1, 4]]
    assert chisquare(counts.tolist(), [3000, 1000]).pvalue > 1e-3


def test_sample_at_the_top_of_the_range_draws_the_last_token_with_mass(monkeypatch) -> None:
    """u * total rounding up to the total (u = 1 here) falls past the end: the last token with
    mass is drawn, never a trailing zero."""
    monkeypatch.setattr(torch, "rand", lambda *args, **kwargs: torch.ones(1, dtype=torch.float64))
    assert sample(torch.tensor([0.2, 0.8, 0.0, 0.0])) == 1


@pytest.mark.parametrize("probs", [[0.0, 0.0], [float("nan"), 1.0], [float("inf"), 1.0]])
def test_sample_refuses_a_distribution_without_finite_mass(probs) -> None:
    with pytest.raises(ValueError, match="positive sum"):
        sample(torch.tensor(probs))


def _cumsum_sample(probs: torch.Tensor, generator: torch.Generator) -> int:
    """The one-level rule `sample` implements: the first token whose cumulative mass exceeds u times the total."""
    cumulative = probs.to(torch.float64).cumsum(0)
    u = torch.rand((1,), dtype=torch.float64, generator=generator)
    return int(torch.searchsorted(cumulative, u * cumulative[-1], right=True).item())


@pytest.mark.parametrize("vocab", [4, 1536, 49152])
def test_sample_in_blocks_draws_what_one_cumulative_sum_draws(vocab: int) -> None:
    """The two-level search over blocks of tokens picks the same token as one cumulative sum over
    the whole row, for the same uniform (rows of 1536 and 49152 tokens are searched in blocks)."""
    g = torch.Generator().manual_seed(vocab)
    for seed in range(200):
        probs = torch.softmax(torch.randn(vocab, generator=g) * 3, dim=-1)
        probs[torch.randint(0, vocab, (vocab // 4,), generator=g)] = 0.0
        assert sample(probs, torch.Generator().manual_seed(seed)) == _cumsum_sample(probs, torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_processed_probs_into_a_buffer_equals_a_fresh_result(dtype: torch.dtype) -> None:
    logits = (torch.randn(5, 1000, generator=torch.Generator().manual_seed(0)) * 4).to(dtype)
    params = SamplingParams(temperature=0.7)
    out = torch.full((5, 1000), float("nan"))
    result = processed_probs(logits, params, out=out)
    assert result.data_ptr() == out.data_ptr()
    assert torch.allclose(result, processed_probs(logits, params), atol=1e-7)
    # top-k / top-p allocate as before; a buffer of another shape is refused
    topk = SamplingParams(temperature=0.7, top_k=3)
    assert torch.equal(processed_probs(logits, topk, out=torch.empty(5, 1000)), processed_probs(logits, topk))
    with pytest.raises(ValueError, match="out must be"):
        processed_probs(logits, params, out=torch.empty(4, 1000))
