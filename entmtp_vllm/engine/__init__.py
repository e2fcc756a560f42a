"""The reference engine: tree speculative decoding over a transformers model (and its AR baseline).

Imports the core; the core never imports this package. Names are loaded lazily so that
`entmtp --help` does not import transformers.
"""

from __future__ import annotations

import importlib

_EXPORTS = {
    "Generation": "entmtp_vllm.engine.records",
    "StepRecord": "entmtp_vllm.engine.records",
    "ReferenceEngine": "entmtp_vllm.engine.reference",
    "METHODS": "entmtp_vllm.engine.reference",
}

__all__ = list(_EXPORTS)


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
