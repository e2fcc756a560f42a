"""What one tree step plans: each request's tree to verify (`Verification`), the step's plan
(`StepPlan`, from `_prepare_inputs` to sampling and drafting), and how a request's vLLM sampling
parameters map to the core's (`core_params`) or fall outside the tree path (`unsupported`)."""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

import numpy as np
import torch

from entmtp_vllm.config import SamplingParams
from entmtp_vllm.topology import TreeBuffers
from entmtp_vllm.vllm_plugin.tree_step import TreeStep

_SAMPLING_EPS = 1e-5  # vLLM's threshold below which a temperature means greedy


@dataclass
class Verification:
    """One request's tree to verify this step."""

    buffers: TreeBuffers
    tokens: torch.Tensor
    """long[N]: root + the scheduled drafts."""
    token_ids: list[int]
    """`tokens` as Python ints, what the acceptance walks read."""
    chain: bool
    capture_start: int
    """Where this request's rows start in `TreeStep.capture_rows` (-1: not captured)."""
    token_probs: tuple[float, ...] = ()
    """The proposal's head probability of each node (`Proposal.token_probs`, cut to the tree)."""


@dataclass
class StepPlan:
    """What `_prepare_inputs` learnt, for `_sample` and drafting of the same step."""

    num_reqs: int
    starts: np.ndarray
    """int64[num_reqs + 1]: each request's first token row."""
    trees: list[Verification | None]
    params: list[SamplingParams]
    prefix_lens: np.ndarray
    """int64[num_reqs]: tokens each request had in the KV cache before this step."""
    tree_step: TreeStep | None
    stock_sampler: bool = False
    """Some request uses a sampler feature the tree path does not apply: verify no tree this
    step, sample with vLLM's sampler, draft nothing."""
    outcomes: list[tuple[int, float, float, int | None] | None] | None = None
    """Per request after verification: (token row of the last accepted node, p0, entropy,
    accept length of a tree step or None)."""
    decode_only: bool = False
    """Every request computes one row plus its drafts (no prefill chunk): a step the step-cost
    model learns from."""
    tree_tokens: int = 0
    """Rows of requests verifying a branching tree."""
    observed: list[tuple[int, list[int]]] | None = None
    """Per request after verification, for heads with a prefix layer only: the position of its
    first accepted row and the token rows of its accepted nodes (root first; after a prefill,
    the chunk's last row)."""
    logit_bias: list[dict[int, float] | None] = field(default_factory=list)
    """Per request: its logit bias (token: bias), or None."""
    min_p: list[float] = field(default_factory=list)
    """Per request: its min_p (0: none)."""


def core_params(sampling_params) -> SamplingParams:
    """vLLM's per-request sampling parameters as the core's (temperature, top-k, top-p); one
    shared (frozen) value per setting, since every request is read every step."""
    if sampling_params is None or sampling_params.temperature < _SAMPLING_EPS:
        return _GREEDY
    top_k = sampling_params.top_k if sampling_params.top_k and sampling_params.top_k > 0 else 0
    return _sampled(float(sampling_params.temperature), int(top_k), float(sampling_params.top_p))


_GREEDY = SamplingParams()


@functools.lru_cache(maxsize=256)
def _sampled(temperature: float, top_k: int, top_p: float) -> SamplingParams:
    return SamplingParams(temperature=temperature, top_k=top_k, top_p=top_p)


def unsupported(sampling_params, acceptance: str = "lossless") -> list[str]:
    """The sampler features of a request that only vLLM's own sampler applies (the tree path
    applies temperature, top-k, top-p, min_p and logit bias; min_p not under typical acceptance,
    whose bonus token is drawn by EntMTP's own sampler)."""
    if sampling_params is None:
        return []
    found = []
    if sampling_params.presence_penalty or sampling_params.frequency_penalty:
        found.append("presence/frequency penalties")
    if sampling_params.repetition_penalty not in (None, 1.0):
        found.append("repetition_penalty")
    if sampling_params.min_p and acceptance == "typical":
        found.append("min_p under typical acceptance")
    if sampling_params.min_tokens:
        found.append("min_tokens")
    if sampling_params.allowed_token_ids or sampling_params.bad_words:
        found.append("allowed_token_ids/bad_words")
    if sampling_params.logprobs is not None:
        found.append("logprobs")
    return found
