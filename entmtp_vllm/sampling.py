"""From target logits to the distribution a token is drawn from.

`processed_probs` applies the sampling parameters in the usual order
(temperature, then top-k, then top-p) and renormalises; temperature 0 gives the
one-hot argmax. Every acceptance rule compares drafts against, and samples
bonus tokens from, this processed distribution.
"""

from __future__ import annotations

import torch

from entmtp_vllm.config import SamplingParams


_BLOCKS = (512, 256, 128)  # block widths tried by greedy_tokens, widest first


def greedy_tokens(logits: torch.Tensor) -> torch.Tensor:
    """argmax over the last dimension, ties to the lowest index and a NaN counting as the maximum
    (as `torch.argmax`), in two passes over blocks of the row: the blocks' maxima (`amax`, which
    vectorises on CPU, unlike a max that tracks indices), then the index of the maximum inside the
    first block holding it. The first block holding the row's maximum holds its first occurrence,
    so the index is argmax's. Exact in any dtype, so half-precision logits are not widened.

    Measured on a Xeon with AVX512, one thread, 38 rows x 49152 (a verification step at 16
    requests): 0.58 ms in bf16 (0.36 in float32) against 1.32 ms for `max(...).indices` after
    widening to float32, and 6.4 ms for a bf16 `argmax`. A vocabulary no block width divides,
    and logits off the CPU, take `max(...).indices` (widened)."""
    vocab = logits.shape[-1]
    block = next((b for b in _BLOCKS if vocab % b == 0 and vocab >= 2 * b), None)
    if block is None or logits.device.type != "cpu":  # on a GPU, one argmax kernel beats several
        if logits.dtype in (torch.float16, torch.bfloat16):
            logits = logits.float()
        return logits.max(dim=-1).indices
    rows = logits.reshape(-1, vocab // block, block)
    best = rows.amax(dim=-1).max(dim=-1).indices
    within = rows[torch.arange(rows.shape[0], device=rows.device), best].max(dim=-1).indices
    return (best * block + within).reshape(logits.shape[:-1])


def processed_probs(logits: torch.Tensor, params: SamplingParams) -> torch.Tensor:
    """Probabilities over the last dimension of `logits` ([V] or [N, V]) under `params`.

    Half-precision logits are computed in float32; float32/float64 keep their dtype.
    Temperature 0 gives a one-hot argmax (ties go to the lowest index, as `torch.argmax`).
    Top-k keeps every token tied with the k-th largest logit. Top-p keeps the smallest
    prefix of the tokens sorted by probability (stable sort: lower index first on ties)
    whose mass reaches `top_p`; at least the most likely token always stays.
    """
    if not logits.is_floating_point():
        raise TypeError(f"logits must be floating point, got {logits.dtype}")
    if logits.dtype in (torch.float16, torch.bfloat16):
        logits = logits.float()
    if params.greedy:
        top = greedy_tokens(logits).unsqueeze(-1)
        return torch.zeros_like(logits).scatter_(-1, top, 1.0)

    scaled = logits / params.temperature
    vocab = scaled.shape[-1]
    if 0 < params.top_k < vocab:
        kth = scaled.topk(params.top_k, dim=-1).values[..., -1:]
        scaled = scaled.masked_fill(scaled < kth, float("-inf"))
    probs = scaled.softmax(dim=-1)
    if params.top_p < 1.0:
        sorted_probs, order = probs.sort(dim=-1, descending=True, stable=True)
        # Mass strictly before each sorted token: keep it while that mass is below top_p.
        before = sorted_probs.cumsum(dim=-1) - sorted_probs
        keep_sorted = before < params.top_p
        keep = torch.zeros_like(keep_sorted).scatter_(-1, order, keep_sorted)
        probs = probs * keep
        probs = probs / probs.sum(dim=-1, keepdim=True)
    return probs


def sample(probs: torch.Tensor, generator: torch.Generator | None = None) -> int:
    """One token id drawn from the 1-D distribution `probs` (`generator` makes it reproducible;
    `probs` need not sum to 1, its entries must be >= 0).

    By inverting the cumulative distribution, in float64: one uniform u, the first token whose
    cumulative mass exceeds u times the total. Exact up to float64 rounding, and a token of
    probability 0 is never drawn. On CPU it is about 16x faster than `torch.multinomial` (57
    against 913 us for a 49152-token row, AVX512 Xeon, 2 threads), which spends its time drawing
    one exponential per token. The generator must live on the same device as `probs`; None uses
    torch's global RNG.
    """
    if probs.dim() != 1:
        raise ValueError(f"sample expects a 1-D distribution, got shape {tuple(probs.shape)}")
    cumulative = probs.to(torch.float64).cumsum(0)
    total = cumulative[-1]
    if not bool(torch.isfinite(total) & (total > 0)):  # host sync (GPU), as the .item() below
        raise ValueError(f"sample needs finite probabilities with a positive sum, got a sum of {float(total)}")
    u = torch.rand((1,), dtype=torch.float64, generator=generator, device=probs.device)
    index = int(torch.searchsorted(cumulative, u * total, right=True).item())
    if index >= probs.shape[0]:  # u * total rounded up to the total: the last token with mass
        index = int(torch.nonzero(probs > 0)[-1].item())
    return index
