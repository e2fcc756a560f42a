"""A reduced drafting vocabulary: the heads rank only the tokens the model actually writes.

On CPU a head call is dominated by its LM-head projection over the full vocabulary (49k
rows for SmolLM2: ~7 ms of a ~9 ms head call in bf16 on one thread). Restricting the
projection to the most frequent output tokens (FR-Spec's idea) makes drafting several times
cheaper. It cannot change what is generated: the target verifies every draft, so a token
outside the draft vocabulary is simply never drafted (acceptance may drop slightly).

The list is built from the model's own answers (the self-distillation data), most frequent
first, and stored next to the heads as `draft_vocab.json`:

    {"format": "entmtp-draft-vocab", "version": 1, "token_ids": [...], "coverage": 0.99, ...}
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import torch

from entmtp_vllm.errors import EntMTPError

FILE_NAME = "draft_vocab.json"
FORMAT = "entmtp-draft-vocab"


def build_draft_vocab(sequences: Iterable[Sequence[int]], size: int) -> tuple[list[int], float]:
    """The `size` most frequent token ids over `sequences` (ties: smaller id first), and the
    fraction of all tokens they cover."""
    if size < 1:
        raise EntMTPError(f"draft vocabulary size must be at least 1, got {size}")
    counts: Counter[int] = Counter()
    for sequence in sequences:
        counts.update(int(t) for t in sequence)
    total = sum(counts.values())
    if total == 0:
        raise EntMTPError("draft vocabulary: no tokens to count")
    ranked = sorted(counts.items(), key=lambda item: (-item[1], item[0]))[:size]
    return [token for token, _ in ranked], sum(count for _, count in ranked) / total


def save_draft_vocab(folder: str | Path, token_ids: Sequence[int], meta: dict[str, Any]) -> Path:
    """Write `draft_vocab.json` into the heads folder."""
    path = Path(folder) / FILE_NAME
    data = {"format": FORMAT, "version": 1, **meta, "size": len(token_ids), "token_ids": [int(t) for t in token_ids]}
    path.write_text(json.dumps(data) + "\n", encoding="utf-8")
    return path


def load_draft_vocab(folder: str | Path, vocab_size: int, size: int | None = None) -> torch.Tensor | None:
    """The draft vocabulary stored with the heads in `folder` (long[K]), or None if absent.
    `size`: keep only the first (most frequent) `size` ids; None or more than stored: all."""
    if size is not None and size < 1:
        raise EntMTPError(f"draft vocabulary size must be at least 1, got {size}")
    path = Path(folder) / FILE_NAME
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        ids = data["token_ids"]
        if data.get("format") != FORMAT:
            raise ValueError(f"format is {data.get('format')!r}, expected {FORMAT!r}")
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise EntMTPError(f"{path}: not a valid draft vocabulary ({exc}); delete it to draft over the full vocabulary") from None
    tensor = torch.tensor(ids, dtype=torch.long)
    if tensor.numel() == 0 or tensor.min() < 0 or tensor.max() >= vocab_size or tensor.unique().numel() != tensor.numel():
        raise EntMTPError(
            f"{path}: token ids must be distinct and in [0, {vocab_size}) for this model; "
            "rebuild it for this model or delete it"
        )
    return tensor if size is None else tensor[:size]
