"""The model, tokenizer and drafter of a tree-search stage, loaded on first use (a resumed run may
need none), and the frontier log's model and heads settings as the loaders take them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from entmtp_vllm.errors import EntMTPError


def raw_setting(value: str | None, default_prefix: str) -> str | None:
    """A model / heads setting as the loaders take it (the log keeps a readable label)."""
    return None if value is None or value.startswith(default_prefix) else value


def frontier_model_heads(settings: dict[str, Any]) -> tuple[str | None, str | None]:
    """(model, heads) of a frontier's settings for the loaders: None for the embedded model and the
    shipped heads."""
    return raw_setting(settings["model"], "embedded"), raw_setting(settings["heads"], "shipped")


class Resources:
    """Model, tokenizer and drafter, loaded on first use (a resumed run may need none)."""

    def __init__(self, model_name: str | None = None, heads: str | None = None, dtype: str = "float32",
                 model=None, tokenizer=None, drafter=None) -> None:
        self.model_name, self.heads, self.dtype = model_name, heads, dtype
        self._model, self._tokenizer, self._drafter = model, tokenizer, drafter

    @property
    def num_heads(self) -> int:
        if self._drafter is not None:
            return self._drafter.max_depth
        from entmtp_vllm.engine.loading import default_heads_folder
        from entmtp_vllm.heads.checkpoint import read_heads_config

        folder = Path(self.heads) if self.heads is not None else default_heads_folder("hydra")
        if not folder.exists():
            raise EntMTPError(f"no heads at {folder}: pass --heads FOLDER (a folder with heads.safetensors + config.json)")
        return int(read_heads_config(folder)["num_heads"])

    @property
    def tokenizer(self):
        if self._tokenizer is None:
            if self._model is not None:
                raise EntMTPError("a tokenizer is needed to encode the prompts")
            from transformers import AutoTokenizer

            from entmtp_vllm.model_store import resolve_model

            self._tokenizer = AutoTokenizer.from_pretrained(resolve_model(self.model_name))
        return self._tokenizer

    def load(self):
        """(model, tokenizer, drafter)."""
        if self._model is None:
            from entmtp_vllm.engine.loading import load_target

            self._model, tokenizer = load_target(self.model_name, self.dtype)
            self._tokenizer = self._tokenizer or tokenizer
        if self._drafter is None:
            from entmtp_vllm.engine.loading import load_drafter

            self._drafter = load_drafter(self.heads, self._model)
        return self._model, self._tokenizer, self._drafter

    @classmethod
    def of_frontier(cls, settings: dict[str, Any], dtype: str) -> Resources:
        """The frontier's model and heads (its settings), at `dtype`."""
        return cls(*frontier_model_heads(settings), dtype)
