"""The best evaluation a training run has seen: its heads and scores in `WORK_DIR/best.pt`, and
which held-out positions the scores are of (a best compares only with evaluations of the same
positions; they change when the teacher cache grows or is rebuilt)."""

from __future__ import annotations

import hashlib
from pathlib import Path

import torch

from entmtp_vllm.training.teacher_cache import CacheSplit

FILE = "best.pt"


def eval_key(val: CacheSplit, rows: torch.Tensor) -> str:
    """Which held-out positions (`rows` of `val`) an evaluation scored."""
    digest = hashlib.sha1(rows.numpy().tobytes())
    digest.update(val.tokens[rows].numpy().tobytes())
    return f"{val.num_records}:{rows.numel()}:{digest.hexdigest()[:16]}"


def save_best(work: Path, heads_state: dict, best: dict) -> None:
    """Write the kept best (written whole, then renamed: a killed job leaves the previous one)."""
    torch.save({"heads": heads_state, "best": best}, work / "best.tmp")
    (work / "best.tmp").rename(work / FILE)


def best_heads_state(work: Path) -> dict | None:
    """The kept best heads' state dict (None: nothing kept yet)."""
    path = work / FILE
    return torch.load(path, map_location="cpu", weights_only=False)["heads"] if path.exists() else None
