"""Head checkpoints: our format, the published Hydra layout, and the shipped heads.

Our format is a folder with `heads.safetensors` (the heads' own weights; the
base model's LM head is never stored unless the heads have their own) and
`config.json`:

    {"format": "entmtp-heads", "version": 1, "kind": "hydra"|"medusa",
     "num_heads", "num_layers", "hidden_size", "vocab_size", "own_lm_head",
     "lm_head_bias", "share_layers", "prefix_layer": {...}|null, "dtype": ...,
     "draft_vocab_size": N|null, "verifier": {...}, "base_model": name,
     "training": {...}, "created": ISO date}

`verifier` names the model the heads draft for and fingerprints its embedding and
LM head (`heads/verifier.py`); servers refuse another model with it. Folders
written before it existed keep the same fields in `heads.json` and no verifier
record; they are still read (`read_heads_config`), and checked on sizes only.

`dtype` is how the weights are stored: float16 (the default), bfloat16, float32, or int8
(every 2-D weight as int8 with a float32 scale per output row, `<key>.int8_scale`; the rest
float16), which `load_heads` turns back into floats: about half the size of float16, for
heads that would not fit a package otherwise.

`load_heads(folder, base_config)` checks the heads against the base model's
config (hidden size, vocabulary) and raises `EntMTPError` on a mismatch, so a
wrong pairing fails before decoding.

`load_hydra_reference_checkpoint(folder)` reads the layout the Hydra authors
publish: `config.json` (`hydra_num_heads`, `hydra_num_layers`, `hydra_head_arch`,
`grounded_heads`, `base_model_name_or_path`) and the state dict of their
`hydra_head` module (`hydra_lm_head.pt`, or a `.safetensors` file) with keys
`hydra_mlp.{i}.{j}.linear|res_connection.{weight,bias}` and
`hydra_lm_head.{i}.{weight,bias}` (optionally prefixed by `hydra_head.`). In that
code `[ResBlock(h)] * (n - 1)` repeats one module, so blocks 1..n-1 of a head are
one shared block; it is loaded as such (`share_layers=True`).
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from entmtp_vllm.errors import EntMTPError
from entmtp_vllm.heads import HEAD_KINDS, DraftHeads, HydraHeads, MedusaHeads, PrefixLayerConfig
from entmtp_vllm.heads.verifier import KEY as VERIFIER_KEY
from entmtp_vllm.heads.verifier import VerifierRecord, locate_weights

FORMAT = "entmtp-heads"
VERSION = 1
WEIGHTS = "heads.safetensors"
CONFIG = "config.json"
LEGACY_CONFIG = "heads.json"
"""The config's name in folders saved before `CONFIG` (read, never written)."""
INT8_SCALE = ".int8_scale"
STORED_DTYPES = ("float16", "bfloat16", "float32", "int8")
ASSETS = Path(__file__).resolve().parent.parent / "assets" / "heads"
SHIPPED = {"hydra": "smollm2-135m-hydra", "medusa": "smollm2-135m-medusa"}


def default_heads_path(kind: str = "hydra") -> Path:
    """The heads shipped with the package for the embedded SmolLM2-135M-Instruct."""
    if kind not in SHIPPED:
        raise EntMTPError(f"no shipped heads of kind {kind!r}: use one of {', '.join(SHIPPED)}")
    return ASSETS / SHIPPED[kind]


def _get(config, key: str, default=None):
    if config is None:
        return default
    if isinstance(config, dict):
        return config.get(key, default)
    return getattr(config, key, default)


def quantize_int8(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Every floating 2-D weight as int8 with a symmetric float32 scale per output row (its
    largest magnitude / 127) under `<key>.int8_scale`; other floating tensors float16."""
    out = {}
    for key, value in state.items():
        if value.is_floating_point() and value.dim() == 2:
            value = value.detach().float()
            scale = value.abs().amax(dim=1).clamp_min(1e-12) / 127
            out[key] = torch.round(value / scale[:, None]).clamp(-127, 127).to(torch.int8)
            out[key + INT8_SCALE] = scale
        else:
            out[key] = value.detach().half() if value.is_floating_point() else value.detach()
    return out


def dequantize_int8(state: dict[str, torch.Tensor], where: str) -> dict[str, torch.Tensor]:
    """The inverse of `quantize_int8` (float32 weights); `EntMTPError` when a scale is missing."""
    out = {}
    for key, value in state.items():
        if key.endswith(INT8_SCALE):
            continue
        if value.dtype == torch.int8:
            scale = state.get(key + INT8_SCALE)
            if scale is None or scale.shape != value.shape[:1]:
                raise EntMTPError(f"{where}: int8 weight {key} has no matching {key + INT8_SCALE}: re-save the heads")
            value = value.float() * scale.float()[:, None]
        out[key] = value
    return out


def save_heads(heads: DraftHeads, folder: str | Path, meta: dict | None = None,
               dtype: torch.dtype | str = torch.float16, verifier: VerifierRecord | None = None) -> Path:
    """Write `heads.safetensors` + `config.json` into `folder` (created); return the folder.
    `dtype`: a torch floating dtype, or one of `STORED_DTYPES` by name ("int8": `quantize_int8`);
    `verifier`: the record of the model the heads draft for (None: none is written)."""
    name = dtype if isinstance(dtype, str) else str(dtype).replace("torch.", "")
    if name not in STORED_DTYPES:
        raise EntMTPError(f"heads cannot be stored as {name!r}: use one of {', '.join(STORED_DTYPES)}")
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    if name == "int8":
        state = quantize_int8(heads.state_dict())
    else:
        torch_dtype = getattr(torch, name)
        state = {k: v.detach().to("cpu", torch_dtype if v.is_floating_point() else v.dtype) for k, v in heads.state_dict().items()}
    state = {k: v.to("cpu").contiguous() for k, v in state.items()}
    save_file(state, str(folder / WEIGHTS), metadata={"format": FORMAT})
    (folder / WEIGHTS).chmod(0o644)  # safetensors writes 0600; shipped package data must be readable
    config = {"format": FORMAT, "version": VERSION, **heads.config_dict(), "dtype": name}
    meta = dict(meta or {})
    config["draft_vocab_size"] = meta.pop("draft_vocab_size", None)
    if verifier is not None:
        config[VERIFIER_KEY] = verifier.to_json()
    config["base_model"] = meta.pop("base_model", None)
    config["training"] = meta.pop("training", None)
    config["created"] = meta.pop("created", time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
    config.update(meta)
    write_heads_config(folder, config)
    return folder


def write_heads_config(folder: str | Path, config: dict) -> Path:
    """Write `config` as the folder's `config.json` (lists of numbers on one line each) and drop a
    `heads.json` left by an older save, so that one config describes the folder."""
    text = json.dumps(config, indent=2)
    text = re.sub(r"\[\s+([-+0-9.eE,\s]+?)\s+\]", lambda m: "[" + " ".join(m.group(1).split()) + "]", text)
    (Path(folder) / CONFIG).write_text(text + "\n")
    (Path(folder) / LEGACY_CONFIG).unlink(missing_ok=True)
    return Path(folder) / CONFIG


def _read_json(path: Path) -> dict:
    try:
        config = json.loads(path.read_text())
    except ValueError as exc:
        raise EntMTPError(f"{path} is not valid JSON ({exc}): re-save the heads") from None
    if not isinstance(config, dict):
        raise EntMTPError(f"{path} is not a JSON object: re-save the heads")
    return config


def heads_config_path(folder: str | Path) -> Path:
    """The file that describes a heads folder: `config.json`, or an older folder's `heads.json`."""
    folder = Path(folder)
    path, legacy = folder / CONFIG, folder / LEGACY_CONFIG
    if path.is_file():
        config = _read_json(path)
        if config.get("format") == FORMAT or not legacy.is_file():
            if "hydra_num_heads" in config:
                raise EntMTPError(
                    f"{folder} holds heads in the published Hydra layout: load them with load_hydra_reference_checkpoint"
                )
            return path
    if legacy.is_file():
        return legacy
    raise EntMTPError(f"{folder} is not a heads folder ({CONFIG} missing): pass a folder written by `entmtp train-heads`")


def read_heads_config(folder: str | Path) -> dict:
    """The heads' config (`config.json`, or an older folder's `heads.json`), checked for format,
    version and kind."""
    path = heads_config_path(folder)
    config = _read_json(path)
    if config.get("format") != FORMAT or config.get("version") != VERSION:
        raise EntMTPError(f"{path} is not a version-{VERSION} '{FORMAT}' file: re-save the heads with this version")
    if config.get("kind") not in HEAD_KINDS:
        raise EntMTPError(f"{path}: unknown head kind {config.get('kind')!r}; expected one of {', '.join(HEAD_KINDS)}")
    return config


def check_base_compat(config: dict, base_config, where: str, model: str | None = None) -> None:
    """`EntMTPError` when heads of `config` cannot run on a base model of `base_config` (named
    `model` in the message when given)."""
    if base_config is None:
        return
    base = model or "the base model"
    for key, what in (("hidden_size", "hidden size"), ("vocab_size", "a vocabulary of")):
        value = _get(base_config, key)
        if value is not None and int(value) != config[key]:
            raise EntMTPError(
                f"heads {where} expect {what} {config[key]} but {base} has {value}: "
                f"use heads trained for this model (they were trained for {config.get('base_model')})"
            )


def build_heads(config: dict) -> DraftHeads:
    prefix = config.get("prefix_layer")
    return HEAD_KINDS[config["kind"]](
        config["hidden_size"], config["vocab_size"], num_heads=config["num_heads"], num_layers=config["num_layers"],
        own_lm_head=config.get("own_lm_head", False), lm_head_bias=config.get("lm_head_bias", False),
        share_layers=config.get("share_layers", False),
        prefix_layer=None if prefix is None else PrefixLayerConfig(**prefix),
    )


def load_heads(folder: str | Path, base_config=None, dtype: torch.dtype = torch.float32, device: str | torch.device = "cpu") -> DraftHeads:
    """Heads saved by `save_heads`, checked against `base_config` (a config object or dict)."""
    folder = Path(folder)
    config = read_heads_config(folder)
    check_base_compat(config, base_config, f"in {folder}")
    heads = build_heads(config)
    weights = folder / WEIGHTS
    if not weights.is_file():
        raise EntMTPError(f"{weights} is missing: the heads folder is incomplete, re-save it")
    state = load_file(str(weights))
    if config.get("dtype") == "int8":
        state = dequantize_int8(state, str(weights))
    missing, unexpected = heads.load_state_dict(state, strict=False)
    if missing or unexpected:
        raise EntMTPError(f"{weights} does not match {heads_config_path(folder).name} (missing {missing[:3]}, unexpected {unexpected[:3]}): re-save the heads")
    heads.meta = config  # the whole config (verifier, training data, date, ...)
    return heads.to(device=device, dtype=dtype).eval()


# ---------------------------------------------------------------- published Hydra layout

_KEY = re.compile(r"^(?:.*\.)?hydra_(mlp|lm_head)\.(\d+)\.(?:(\d+)\.)?(linear|res_connection)?\.?(weight|bias)$")


def _reference_state(folder: Path) -> dict[str, torch.Tensor]:
    candidates = [folder / "hydra_lm_head.safetensors", folder / "hydra_lm_head.pt", *sorted(folder.glob("*.safetensors")),
                  *sorted(folder.glob("*.pt")), *sorted(folder.glob("*.bin"))]
    for path in candidates:
        if path.is_file():
            if path.suffix == ".safetensors":
                return load_file(str(path))
            state = torch.load(path, map_location="cpu", weights_only=True)
            if not isinstance(state, dict):
                raise EntMTPError(f"{path} is not a state dict: expected the saved hydra_head module weights")
            return state
    raise EntMTPError(f"{folder} has no Hydra weights (hydra_lm_head.pt or a .safetensors file)")


def load_hydra_reference_checkpoint(folder: str | Path, base_config=None, dtype: torch.dtype = torch.float32) -> DraftHeads:
    """Heads in the published Hydra layout (arch `mlp`), as `HydraHeads` (grounded) or
    `MedusaHeads` (ungrounded), with their own biased LM heads and shared repeated blocks."""
    folder = Path(folder)
    config_path = folder / "config.json"
    if not config_path.is_file():
        raise EntMTPError(f"{folder} has no config.json: not a Hydra checkpoint folder")
    ref = json.loads(config_path.read_text())
    if "hydra_num_heads" not in ref:
        raise EntMTPError(f"{config_path} has no hydra_num_heads: not a Hydra checkpoint config")
    arch = ref.get("hydra_head_arch", "mlp")
    if arch != "mlp":
        raise EntMTPError(f"Hydra head architecture {arch!r} is not supported (only 'mlp'): convert or retrain the heads")
    num_heads, num_layers = int(ref["hydra_num_heads"]), int(ref.get("hydra_num_layers", 1))
    grounded = bool(ref.get("grounded_heads", False))
    raw = _reference_state(folder)
    state: dict[tuple, torch.Tensor] = {}
    for key, value in raw.items():
        match = _KEY.match(key)
        if match is None:
            continue
        part, head, block, sub, name = match.groups()
        state[(part, int(head), None if block is None else int(block), sub, name)] = value
    try:
        lm0 = state[("lm_head", 0, None, None, "weight")]
    except KeyError:
        raise EntMTPError(f"{folder}: no hydra_lm_head.0.weight among the weights; is it a Hydra 'mlp' checkpoint?") from None
    vocab, hidden = lm0.shape
    meta = {"kind": "hydra" if grounded else "medusa", "hidden_size": hidden, "vocab_size": vocab,
            "base_model": ref.get("base_model_name_or_path")}
    check_base_compat(meta, base_config, f"in {folder}")
    cls = HydraHeads if grounded else MedusaHeads
    heads = cls(hidden, vocab, num_heads=num_heads, num_layers=num_layers, own_lm_head=True,
                lm_head_bias=("lm_head", 0, None, None, "bias") in state, share_layers=True)

    def take(key: tuple) -> torch.Tensor:
        if key not in state:
            raise EntMTPError(f"{folder}: weight hydra_{key[0]}.{key[1]}.{key[2]}.{key[3]}.{key[4]} is missing")
        return state[key]

    with torch.no_grad():
        for i in range(num_heads):
            first = 0
            if grounded:
                block = heads.inputs[i]
                block.proj.weight.copy_(take(("mlp", i, 0, "res_connection", "weight")))
                block.proj.bias.copy_(take(("mlp", i, 0, "res_connection", "bias")))
                block.linear.weight.copy_(take(("mlp", i, 0, "linear", "weight")))
                block.linear.bias.copy_(take(("mlp", i, 0, "linear", "bias")))
                first = 1
            stack = heads.stacks[i]
            if stack.count:
                shared = stack.blocks[0]
                w = take(("mlp", i, first, "linear", "weight"))
                b = take(("mlp", i, first, "linear", "bias"))
                for j in range(first + 1, first + stack.count):  # repeated module: every copy is the same tensor
                    other = state.get(("mlp", i, j, "linear", "weight"))
                    if other is not None and not torch.equal(other, w):
                        raise EntMTPError(f"{folder}: hydra_mlp.{i}.{j} differs from hydra_mlp.{i}.{first}, but the reference shares them")
                shared.linear.weight.copy_(w)
                shared.linear.bias.copy_(b)
            heads.lm_heads[i].weight.copy_(take(("lm_head", i, None, None, "weight")))
            if heads.lm_heads[i].bias is not None:
                heads.lm_heads[i].bias.copy_(take(("lm_head", i, None, None, "bias")))
    heads.meta = {"format": "hydra-reference", **ref}
    return heads.to(dtype).eval()


def load_base_embeddings(model_dir: str | Path) -> tuple[torch.Tensor, torch.Tensor, dict]:
    """(embedding [V, H], LM head [V, H] (the embedding itself when tied), config.json dict) of a
    local Hugging Face Llama-style folder, read straight from its safetensors (no transformers)."""
    weights = locate_weights(model_dir)

    def read(place: tuple[Path, str]) -> torch.Tensor:
        with safe_open(str(place[0]), framework="pt") as handle:
            return handle.get_tensor(place[1])

    embed = read(weights.embed)
    return embed, embed if weights.lm_head == weights.embed else read(weights.lm_head), weights.config
