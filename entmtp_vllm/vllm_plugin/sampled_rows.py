"""`SampledRows`: the processed distributions of one verification step's sampled requests.

    rows = SampledRows()                                   # one per model runner
    probs = rows.compute(logits, {i: (lo, hi), ...}, params)
    accept_lossless_host(buffers, tokens, probs[i], generator)   # or sample(probs[i][0], generator)

Every sampled request's logits rows go through `processed_probs` once per distinct sampling
setting (not once per row the walk visits), into one float32 buffer kept across steps: on glibc's
allocator every fresh [rows, V] tensor is a new mapping whose pages fault in again, which cost more
than the softmax itself (20 rows of 49152: 4.5 ms fresh, 0.5 ms in a kept buffer, 2-core EPYC).
"""

from __future__ import annotations

import torch

from entmtp_vllm.config import SamplingParams
from entmtp_vllm.sampling import processed_probs


class SampledRows:
    """A step's sampled rows, processed; the buffer grows to the largest step seen."""

    def __init__(self) -> None:
        self._buffer: torch.Tensor | None = None

    def _rows(self, count: int, like: torch.Tensor) -> torch.Tensor:
        dtype = torch.float32 if like.dtype in (torch.float16, torch.bfloat16) else like.dtype
        buffer = self._buffer
        if buffer is None or buffer.shape[0] < count or buffer.shape[1] != like.shape[-1] or buffer.dtype != dtype \
                or buffer.device != like.device:
            size = max(count, 2 * buffer.shape[0] if buffer is not None else 0)
            buffer = self._buffer = torch.empty(size, like.shape[-1], dtype=dtype, device=like.device)
        return buffer

    def compute(
        self, logits: torch.Tensor, ranges: dict[int, tuple[int, int]], params: list[SamplingParams]
    ) -> dict[int, torch.Tensor]:
        """For each request index in `ranges` ((first, end) of its rows in `logits`), its rows
        processed under `params[index]` (float[end - first, V]; views of the buffer, valid until
        the next call). Requests with the same setting are processed together; a group whose rows
        are one contiguous run of `logits` is read in place."""
        if not ranges:
            return {}
        groups: dict[SamplingParams, list[int]] = {}
        for i in ranges:
            groups.setdefault(params[i], []).append(i)
        buffer = self._rows(sum(hi - lo for lo, hi in ranges.values()), logits)
        out: dict[int, torch.Tensor] = {}
        start = 0
        for setting, members in groups.items():
            spans = [ranges[i] for i in members]
            count = sum(hi - lo for lo, hi in spans)
            contiguous = all(spans[k][1] == spans[k + 1][0] for k in range(len(spans) - 1))
            rows = logits[spans[0][0] : spans[-1][1]] if contiguous else logits[
                torch.cat([torch.arange(lo, hi) for lo, hi in spans]).to(logits.device)]
            probs = processed_probs(rows, setting, out=buffer[start : start + count])
            offset = 0
            for i, (lo, hi) in zip(members, spans):
                out[i] = probs[offset : offset + hi - lo]
                offset += hi - lo
            start += count
        return out
