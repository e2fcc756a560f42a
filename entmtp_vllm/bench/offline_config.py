"""What an offline benchmark run is (`OfflineBenchConfig`): its methods as written on the command
line (`MethodSpec`, `parse_methods`) and every setting the run depends on."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from entmtp_vllm.config import CPU_GEMM
from entmtp_vllm.errors import EntMTPError

INTERLEAVE_MODES = ("prompt", "step")
METHOD_FORMS = "ar, tree:SPEC[#NAME], bank:FILE[:POLICY], medusa:SPEC[#NAME]"
_METHOD_START = re.compile(r",(?=(?:ar(?:,|$)|tree:|bank:|medusa:))")


@dataclass(frozen=True)
class MethodSpec:
    """One method of a benchmark run, as written on the command line."""

    label: str
    """The text as given (also the row name in the report)."""

    kind: str
    """ar | tree | bank | medusa."""

    source: str | None = None
    """Tree spec / choices file (tree, medusa) or bank file (bank)."""

    name: str | None = None
    """Tree name inside a choices or bank file (`#NAME`)."""

    policy: str | None = None
    """Policy string for a bank (`bank:FILE:POLICY`); None = the bank's own."""


def parse_methods(values: str | list[str]) -> list[MethodSpec]:
    """`ar,tree:full:2,1,1,bank:b.json:static:small` -> MethodSpecs (AR first, added if absent).

    Commas separate methods only where a new method starts (`ar`, `tree:`, `bank:`,
    `medusa:`), so tree specs such as `full:2,1,1` keep their commas.
    """
    texts = [values] if isinstance(values, str) else list(values)
    parts = [part.strip() for text in texts for part in _METHOD_START.split(text) if part.strip()]
    methods: list[MethodSpec] = []
    for part in parts:
        kind, _, rest = part.partition(":")
        if kind == "ar" and not rest:
            methods.append(MethodSpec(part, "ar"))
        elif kind in ("tree", "medusa") and rest:
            source, _, name = rest.partition("#")
            methods.append(MethodSpec(part, kind, source, name or None))
        elif kind == "bank" and rest:
            source, _, policy = rest.partition(":")
            methods.append(MethodSpec(part, "bank", source, None, policy or None))
        else:
            raise EntMTPError(f"invalid method {part!r}; accepted forms: {METHOD_FORMS}")
    labels = [m.label for m in methods]
    duplicated = sorted({label for label in labels if labels.count(label) > 1})
    if duplicated:
        raise EntMTPError(f"method {duplicated[0]!r} is listed twice")
    if not any(m.kind == "ar" for m in methods):
        methods.insert(0, MethodSpec("ar", "ar"))
    else:
        methods.sort(key=lambda m: m.kind != "ar")
    return methods


@dataclass
class OfflineBenchConfig:
    """Everything one offline benchmark run depends on."""

    datasets: list[str]
    methods: list[MethodSpec]
    num_prompts: int | None = 10
    seed: int = 123
    split: str = "all"
    category: str | None = None
    data_path: str | None = None
    max_tokens: int = 128
    model: str | None = None
    dtype: str = "float32"
    cpu_gemm: str = CPU_GEMM.reference_engine
    threads: int = 1
    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0
    acceptance: str = "typical"
    sampling_seed: int = 0
    heads: str | None = None
    medusa_heads: str | None = None
    check_equal: bool = False
    raw: bool = False
    baseline: str | None = None
    repeats: int = 1
    interleave: str = "step"
    extra: dict[str, Any] = field(default_factory=dict)
