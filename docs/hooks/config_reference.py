"""The configuration reference, generated from the pydantic models' field docstrings.

MkDocs hook (`hooks:` in mkdocs.yml): replaces the marker `<!-- config-reference -->` in
`configuration.md` with one table per settings model. Every description is the field's own
docstring (`use_attribute_docstrings=True` puts it in `model_fields[name].description`), so the
page never drifts from the code. `python docs/hooks/config_reference.py` prints the same Markdown.
"""

from __future__ import annotations

import sys
import types
import typing
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))  # this checkout's package, not another installed copy

MARKER = "<!-- config-reference -->"
PAGE = "configuration.md"


def _sections():
    from entmtp_vllm import config as core
    from entmtp_vllm.lookup import LookupConfig
    from entmtp_vllm.vllm_plugin import config as plugin

    return [
        (
            "vLLM plugin: `--additional-config '{\"entmtp\": {...}}'`",
            "Every setting of the served proposer, also passed by `entmtp serve --config JSON` and "
            "`entmtp bench serve --entmtp-config JSON` (module `entmtp_vllm.vllm_plugin.config`).",
            [plugin.EntMTPConfig, core.StepBudgetConfig, core.StepCostPrior, plugin.BatchFallback, core.TypicalConfig,
             LookupConfig],
        ),
        (
            "Defaults of the library and the front door",
            "The models in `entmtp_vllm/config.py`, where every default of EntMTP is defined once "
            "(`TypicalConfig`, `StepBudgetConfig` and `StepCostPrior` are listed above).",
            [core.SamplingParams, core.FeatureConfig, core.EmbeddedModel, core.KVCacheSizing, core.CpuGemmConfig],
        ),
    ]


def _type_parts(annotation: object) -> list[str]:
    """The alternatives of a field's type, each as Python writes it (`str`, `dict[str, Any]`)."""
    if annotation is type(None):
        return ["None"]
    origin = typing.get_origin(annotation)
    if origin is None:
        return [getattr(annotation, "__name__", str(annotation))]
    args = typing.get_args(annotation)
    if origin is typing.Union or origin is types.UnionType:
        return [part for a in args for part in _type_parts(a)]
    if origin is typing.Literal:
        return [f'"{a}"' if isinstance(a, str) else repr(a) for a in args]
    inner = ", ".join("..." if a is Ellipsis else " | ".join(_type_parts(a)) for a in args)
    return [f"{getattr(origin, '__name__', str(origin))}[{inner}]"]


def _type_name(annotation: object) -> str:
    # alternatives joined by "or", not "|": a pipe would split the table cell on GitHub
    return " or ".join(f"`{part}`" for part in _type_parts(annotation))


def _default(field, models: dict) -> str:
    from pydantic import BaseModel
    from pydantic_core import PydanticUndefined

    value = field.default
    if value is PydanticUndefined:
        return "required"
    if isinstance(value, BaseModel):
        name = type(value).__name__
        set_fields = {k: getattr(value, k) for k in type(value).model_fields if k in value.model_fields_set}
        if not set_fields:
            return f"[`{name}()`](#{name.lower()})" if name in models else f"`{name}()`"
        inner = ", ".join(f"{k}={v!r}" for k, v in set_fields.items())
        return f"`{name}({inner})`"
    if isinstance(value, str):
        value = value.replace(str(REPO) + "/", "")  # the shipped bank: a path inside the package
    return f"`{value!r}`"


def _constraints(field) -> str:
    signs = {"gt": ">", "ge": "≥", "lt": "<", "le": "≤"}
    found = []
    for item in field.metadata:
        for attr, sign in signs.items():
            if getattr(item, attr, None) is not None:
                found.append(f"{sign} {getattr(item, attr)}")
    return f" ({', '.join(found)})" if found else ""


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def render() -> str:
    lines = []
    sections = _sections()
    models = {m.__name__ for _, _, ms in sections for m in ms}
    for title, intro, classes in sections:
        lines += [f"## {title}", "", intro, ""]
        for model in classes:
            lines += [f"### {model.__name__}", ""]
            if model.__doc__:
                lines += [_cell(model.__doc__), ""]
            lines += ["| setting | type | default | what it does |", "|---|---|---|---|"]
            for name, field in model.model_fields.items():
                description = field.description or ""
                assert description, f"{model.__name__}.{name} has no docstring"
                lines.append(
                    f"| `{name}` | {_type_name(field.annotation)}{_constraints(field)} | "
                    f"{_default(field, models)} | {_cell(description)} |"
                )
            lines.append("")
    return "\n".join(lines)


def on_page_markdown(markdown: str, page, config, files) -> str:
    if page.file.src_uri == PAGE:
        assert MARKER in markdown, f"{PAGE} lost its marker {MARKER}"
        return markdown.replace(MARKER, render())
    return markdown


if __name__ == "__main__":
    print(render())
