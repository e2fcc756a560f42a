"""Fixtures for the tree-search tests; the tiny models themselves are built in `_search_parts.py`."""

from __future__ import annotations

import pytest
import torch

from _search_parts import calibrate, random_drafter, random_prompts, tiny_llama
from _tiny_saved_model import save_tiny_model


@pytest.fixture(scope="module")
def tiny():
    """(model, drafter): a 2-layer random Llama (vocab 24) and 3 random Hydra heads."""
    torch.set_num_threads(1)
    model = tiny_llama()
    return model, random_drafter(model)


@pytest.fixture(scope="module")
def calibration(tiny):
    model, drafter = tiny
    return calibrate(model, drafter, random_prompts(3))


@pytest.fixture(scope="session")
def tiny_folders(tmp_path_factory):
    """(model folder, heads folder): a tiny random Llama with SmolLM2's tokenizer (so that real prompt
    sets can be templated and encoded) and 3 random Hydra heads, saved like real ones."""
    model, (heads,) = save_tiny_model(tmp_path_factory.mktemp("search_tiny"))
    return model, heads
