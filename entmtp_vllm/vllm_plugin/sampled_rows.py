"""`SampledRows`: verification of a step's sampled requests, their walks advancing together.

    rows = SampledRows(runner.sampler)                      # one per model runner
    results = rows.verify(logits, {i: root_row}, {i: TokenWalk(...) or None}, settings)

Each sampled request walks the draft-independent rule (`acceptance.TokenWalk`) from its root row;
a request without a tree draws its one token from its root row. At every depth the rows the walks
stand on are gathered into a float32 buffer kept across steps, and put through vLLM's own sampler
steps, as vLLM's `Sampler.sample` runs them without speculation: the temperature
(`Sampler.apply_temperature`), min_p (`apply_min_p`, vLLM's `MinPLogitsProcessor.apply` row by
row), then top-k / top-p and the draw (`Sampler.topk_topp_sampler`, with each seeded request's
generator). A seeded request therefore draws, per emitted token, exactly what vLLM's sampler draws
for it without speculation (on vLLM's CPU platform one seed per token for the fused Gumbel-max
kernel; on CUDA one exponential vector), and takes the same token from the same row. On a CPU an
unseeded request's token is drawn from the same distribution (vLLM's `apply_top_k_top_p`, softmax)
with one uniform from torch's default generator instead of vLLM's noise over the whole vocabulary,
several times cheaper there; on a GPU every request goes through vLLM's sampler step. Logit bias
is applied to the logits before (`apply_logit_biases`), as vLLM's non-argmax-invariant processors
are. Only the rows a walk reaches are processed.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch
from vllm.v1.sample.ops.topk_topp_sampler import apply_top_k_top_p

from entmtp_vllm.acceptance import AcceptResult, TokenWalk
from entmtp_vllm.sampling import sample


@dataclass
class RowSettings:
    """The step's sampling settings per request index, read from vLLM's input batch: the same
    values (and dtypes) vLLM's sampler reads."""

    temperature: np.ndarray
    """float32[num_reqs]."""
    top_k: np.ndarray | None
    """int32[num_reqs] (the vocabulary size where unused), None when no request uses top-k."""
    top_p: np.ndarray | None
    """float32[num_reqs] (1.0 where unused), None when no request uses top-p."""
    min_p: np.ndarray | None
    """float32[num_reqs] (0 where unused), None when no request uses min_p."""
    generators: dict[int, torch.Generator] = field(default_factory=dict)
    """Seeded requests' generators; the others draw from torch's default generator."""

    @classmethod
    def of_batch(cls, batch, num_reqs: int, min_p: list[float]) -> RowSettings:
        """The settings vLLM's sampler reads, from its `InputBatch` (`min_p`: each request's)."""
        return cls(
            temperature=batch.temperature_cpu[:num_reqs],
            top_k=None if batch.no_top_k else batch.top_k_cpu[:num_reqs],
            top_p=None if batch.no_top_p else batch.top_p_cpu[:num_reqs],
            min_p=np.asarray(min_p, dtype=np.float32) if any(min_p) else None,
            generators=dict(batch.generators),
        )


def builtin_logitsprocs(vllm_config, device: torch.device):
    """vLLM's builtin logits processors (min_tokens, logit bias, min_p), built as vLLM builds them
    without speculation: with a speculative method vLLM builds min_tokens only (and refuses min_p
    and logit bias up front); an EntMTP engine applies both, through these processors whenever
    vLLM's own sampler samples (the plugin lets them through: `install.wrap_sampling_checks`)."""
    from vllm.utils.torch_utils import PIN_MEMORY
    from vllm.v1.sample.logits_processor import BUILTIN_LOGITS_PROCESSORS, LogitsProcessors

    return LogitsProcessors(ctor(vllm_config, device, PIN_MEMORY) for ctor in BUILTIN_LOGITS_PROCESSORS)


def apply_min_p(logits: torch.Tensor, min_p: torch.Tensor) -> torch.Tensor:
    """vLLM's min_p (`MinPLogitsProcessor.apply`): tokens whose probability is below `min_p`
    times the row's largest are masked to -inf, in place. `min_p`: float32[rows, 1]."""
    probs = torch.nn.functional.softmax(logits, dim=-1)
    threshold = torch.amax(probs, dim=-1, keepdim=True).mul_(min_p)
    return logits.masked_fill_(probs < threshold, -float("inf"))


def apply_logit_bias(logits: torch.Tensor, rows: slice, bias: dict[int, float]) -> None:
    """vLLM's logit bias (`LogitBiasLogitsProcessor.apply`) on rows `rows` of float32 `logits`,
    in place: each biased token's logit plus its float32 bias."""
    tokens = torch.tensor(list(bias), dtype=torch.long, device=logits.device)
    values = torch.tensor(list(bias.values()), dtype=torch.float32, device=logits.device)
    block = logits[rows]
    block[:, tokens] += values


def apply_logit_biases(logits: torch.Tensor, rows: dict[int, slice], biases: list) -> torch.Tensor:
    """`logits` with request i's logit bias (`biases[i]`) added to its rows (`rows[i]`), in float32
    as vLLM's sampler adds it: in place when the logits are float32, else on a float32 copy;
    `logits` itself when no request has one."""
    if not rows:
        return logits
    if logits.dtype != torch.float32:
        logits = logits.float()
    for i, span in rows.items():
        apply_logit_bias(logits, span, biases[i])
    return logits


def _rows_of(values: torch.Tensor | None, pick: list[int]) -> torch.Tensor | None:
    return None if values is None else values[torch.tensor(pick, device=values.device)]


class SampledRows:
    """The sampled requests' verification; the row buffer grows to the largest step seen.
    `sampler`: the runner's vLLM `Sampler`."""

    def __init__(self, sampler) -> None:
        self.sampler = sampler
        self._buffer: torch.Tensor | None = None

    def _rows(self, count: int, like: torch.Tensor) -> torch.Tensor:
        buffer = self._buffer
        if buffer is None or buffer.shape[0] < count or buffer.shape[1] != like.shape[-1] \
                or buffer.device != like.device:
            size = max(count, 2 * buffer.shape[0] if buffer is not None else 0)
            buffer = self._buffer = torch.empty(size, like.shape[-1], dtype=torch.float32, device=like.device)
        return buffer

    def draw(self, logits: torch.Tensor, rows: dict[int, int], settings: RowSettings) -> dict[int, int]:
        """For each request index in `rows`, a token drawn from row `rows[index]` of `logits` under
        that request's settings, as vLLM's sampler draws it: for a seeded request (and on a GPU for
        every request) the very draw vLLM's sampler makes with its generator; on a CPU, for an
        unseeded one, a draw of the same distribution with one uniform."""
        if not rows:
            return {}
        requests = list(rows)
        block = self._rows(len(requests), logits)[: len(requests)]
        for k, i in enumerate(requests):
            block[k].copy_(logits[rows[i]])  # gathered and widened into the buffer, one row at a time
        index = np.asarray(requests, dtype=np.int64)
        device = block.device

        def column(values: np.ndarray | None) -> torch.Tensor | None:
            return None if values is None else torch.from_numpy(values[index]).to(device)

        self.sampler.apply_temperature(block, column(settings.temperature), True)
        min_p = column(settings.min_p)
        if min_p is not None:
            apply_min_p(block, min_p.unsqueeze(1))
        top_k, top_p = column(settings.top_k), column(settings.top_p)
        seeded = [k for k, i in enumerate(requests) if i in settings.generators]
        if device.type != "cpu" or len(seeded) == len(requests):
            generators = {k: settings.generators[requests[k]] for k in seeded}
            tokens, _ = self.sampler.topk_topp_sampler(block, generators, top_k, top_p)
            return dict(zip(requests, tokens.tolist()))  # host sync (GPU): once per depth
        # On a CPU, vLLM's Gumbel-max kernel draws one noise value per vocabulary entry (0.3-0.4 ms
        # a row of 49152 on one core): only the seeded rows, whose draws must be vLLM's, pay it.
        # The others take vLLM's top-k / top-p and one uniform each from torch's default
        # generator (`sampling.sample`): the same distribution, as an unseeded request's draws in
        # vLLM come from that generator too.
        drawn: dict[int, int] = {}
        plain = list(range(len(requests)))
        if seeded:
            generators = {j: settings.generators[requests[k]] for j, k in enumerate(seeded)}
            tokens, _ = self.sampler.topk_topp_sampler(_rows_of(block, seeded), generators, _rows_of(top_k, seeded),
                                                       _rows_of(top_p, seeded))
            drawn.update(zip((requests[k] for k in seeded), tokens.tolist()))
            plain = [k for k in plain if requests[k] not in drawn]
            block, top_k, top_p = (_rows_of(values, plain) for values in (block, top_k, top_p))
        block = apply_top_k_top_p(block, top_k, top_p)
        probs = torch.ops.aten._softmax.out(block, -1, False, out=block)  # row by row: safe in place
        drawn.update((requests[k], sample(probs[j])) for j, k in enumerate(plain))
        return drawn

    def verify(
        self,
        logits: torch.Tensor,
        roots: dict[int, int],
        walks: dict[int, TokenWalk | None],
        settings: RowSettings,
    ) -> dict[int, AcceptResult]:
        """Every request in `roots` (its root's row in `logits`; a walk's node j is row root + j)
        verified: its walk run to the end, or (walk None: no tree) one token drawn from its root
        row (`AcceptResult([0], token)`). Depth by depth, the rows the walks stand on drawn from
        together."""
        results: dict[int, AcceptResult] = {}
        standing = dict(roots)  # request: the row its walk needs now
        while standing:
            tokens = self.draw(logits, standing, settings)
            onward: dict[int, int] = {}
            for i, token in tokens.items():
                walk = walks.get(i)
                if walk is None:
                    results[i] = AcceptResult([0], token)
                elif walk.visit(token):
                    onward[i] = roots[i] + walk.node
                else:
                    assert walk.result is not None
                    results[i] = walk.result
            standing = onward
        return results
