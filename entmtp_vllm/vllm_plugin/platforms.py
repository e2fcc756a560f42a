"""Which package holds EntMTP's code for each vLLM platform.

Each platform package (`cpu/`, `cuda/`) has an `__init__` that imports nothing of vLLM and
offers: `WORKER` and `STOCK_WORKERS` (the worker the plugin selects, and the stock ones it
replaces), `install(platform_cls)` (in every process, when the plugin registers), `problems(
vllm_config)` (what an EntMTP engine there cannot serve) and, where the platform needs them,
`prepare(vllm_config)` (while any engine's config is built) and `configure(vllm_config)` (an
accepted EntMTP engine's platform settings). Only the running platform's package is imported.
"""

from __future__ import annotations

import importlib
from types import ModuleType

PLATFORM_PACKAGES = {"cpu": "entmtp_vllm.vllm_plugin.cpu", "cuda": "entmtp_vllm.vllm_plugin.cuda"}
"""vLLM platform name (`install.platform_name`): EntMTP's package for it."""


def platform_package(platform: str) -> ModuleType | None:
    """EntMTP's package for a vLLM platform name (None: EntMTP does not run there)."""
    name = PLATFORM_PACKAGES.get(platform)
    return importlib.import_module(name) if name else None

