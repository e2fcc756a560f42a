"""What a head-training run is: its settings (`TrainConfig`) and the frozen tensors of the base
model the heads read (`BaseTensors`)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import torch
from pydantic import BaseModel, ConfigDict


class TrainConfig(BaseModel):
    """Settings of one head-training run."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    cache: Path
    """Teacher cache folder (built by `teacher_cache.build_teacher_cache`)."""
    data: Path | None = None
    """The answers JSONL the cache was built from (the model card reads its generation settings)."""
    work_dir: Path
    """Where checkpoints and the training log go."""
    out: Path | None = None
    """Where the final heads (heads.safetensors, config.json, MODEL_CARD.md) go."""
    weights: Literal["float16", "int8"] = "float16"
    """How the exported weights are stored; int8 (`checkpoint.quantize_int8`) is about half the size."""
    kind: Literal["hydra", "medusa"] = "hydra"
    num_heads: int = 4
    num_layers: int = 1
    prefix_layer: bool = False
    """Hydra++: add the prefix decoder layer (trained on windows of `window` positions)."""
    window: int = 64
    """The prefix layer's attention window: each trained position reads itself and up to `window - 1`
    earlier answer rows of its record (so does the layer when drafting, `PrefixLayerConfig.window`).
    A sample is `window` trained positions after up to `window - 1` rows of context."""
    steps: int | None = None
    """Optimizer steps; default: `epochs` passes over the training positions."""
    epochs: float = 1.0
    batch_size: int = 256
    """Positions per step."""
    lr: float = 1e-3
    weight_decay: float = 0.0
    warmup: int = 50
    min_lr_ratio: float = 0.1
    """Cosine decay from lr to lr·min_lr_ratio."""
    grad_clip: float = 1.0
    teacher: Literal["topk", "full", "hard"] = "topk"
    softmax_vocab: int | None = 8192
    """Train with the student's softmax over a vocabulary subset: the `softmax_vocab` most
    frequent teacher candidates of the training data plus every teacher candidate of the
    batch (≈ 6× cheaper than the full 49k vocabulary on CPU). None: the full vocabulary.
    Evaluation always ranks the full vocabulary."""
    draft_vocab: int | None = 8192
    """Write `draft_vocab.json` beside the exported heads: the `draft_vocab` answer tokens the
    training records use most often, which drafting then ranks instead of the full vocabulary
    (`heads.draft_vocab`; several times cheaper per head call on CPU). None: no file, and a
    stale one in `out` is removed; drafting ranks the full vocabulary."""
    head_weight_decay: float = 1.0
    """Loss weight of head d is head_weight_decay**(d-1) (Medusa uses 0.8)."""
    eval_interval: int = 200
    eval_positions: int = 4096
    ckpt_interval: int = 200
    keep_checkpoints: int = 2
    threads: int = 2
    """torch threads; 0 = adapt at every eval: 2 when the machine's load average leaves a
    core free, else 1 (two threads on an oversubscribed 2-core machine run several times slower)."""
    seed: int = 0
    resume: bool = False
    init_heads: Path | None = None
    """Start from these saved heads (`init_heads.init_from`) instead of fresh weights; a checkpoint to
    resume from wins over them. Step 0 is evaluated, so the log shows what the run adds."""
    max_train_rows: int | None = None
    progress: bool = True
    reload_interval: int | None = None
    """Every this many steps, pick up shards added to the cache since the start (a cache
    build running beside the training keeps adding data; the held-out set is re-drawn)."""
    time_budget_s: float | None = None
    """Stop (and save) once the run's wall time (resumed runs included) reaches this; the
    learning-rate schedule is stretched to end there too."""
    export: Literal["last", "best"] = "last"
    """Which heads go to `out`: the last step's, or those of the evaluation with the best mean
    held-out top-1 (`work_dir/best.pt`; a long run that starts to overfit keeps its best). When
    the held-out positions change (a cache that grew, a resume over a rebuilt cache) the kept best
    is scored again on the new ones before any comparison."""


class BaseTensors:
    """The frozen parts of the base model the heads need: embeddings and LM head (fp32)."""

    def __init__(self, embed: torch.Tensor, lm_head: torch.Tensor, model_name: str, config: dict | None = None) -> None:
        self.embed = embed.float()
        self.lm_head = self.embed if lm_head is embed else lm_head.float()
        self.model_name = model_name
        self.config = config or {"hidden_size": embed.shape[1], "vocab_size": embed.shape[0]}
