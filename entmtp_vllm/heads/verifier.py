"""The verifier record: which model a set of heads drafts for, and a check that a model is it.

Heads read two weights of their model (the verifier): its input embedding and its LM head (a
tied model's LM head is its embedding). The record kept in the heads' `config.json` under
`"verifier"` names that model (name, `architectures[0]`, `model_type`, vocabulary and hidden
size) and holds a FINGERPRINT of both weights:

    {"rows": [16 ids], "columns": [8 ids], "embed_tokens": [[8 floats] x 16], "lm_head": [...]}

`rows` are the centres of 16 equal bins of the real vocabulary (`probe_indices`), `columns` the
centres of 8 bins of the hidden size; the values are the weights at those rows and columns, as
floats. Another model is told apart by `relative_difference`: for each of the two matrices the L2
norm of (probe of the model - probe of the record) over the L2 norm of the record's probe, the
larger of the two. A cast of the same weights moves it by at most the cast's relative rounding
(round to nearest moves each value by at most 2^-9 of itself in bf16, 2^-12 in fp16: SmolLM2's
float32 weights measure 0.0013 in bf16, 0.0002 in fp16); other weights, or a random
re-initialisation of the same shape, give about 1 or more (1.1 to 1.6 against SmolLM2).
`TOLERANCE` (0.02) lies between, ten times above a bf16 cast.

The probe is taken the same way from a Hugging Face folder's safetensors (`probe_folder`: only
the rows needed are read, sharded folders through `model.safetensors.index.json`,
`tie_word_embeddings` from `config.json`) and from tensors in memory (`probe_tensors`: vLLM's
loaded `embed_tokens` / `lm_head` weights, padded past the vocabulary and in any dtype).
`check_model` compares a record with a model and raises a one-line `EntMTPError` naming both.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from entmtp_vllm.errors import EntMTPError

KEY = "verifier"
"""Key of the record in the heads' config."""
PROBE_ROWS = 16
PROBE_COLUMNS = 8
TOLERANCE = 0.02
"""Largest `relative_difference` of the same weights (any cast between float32, bf16 and fp16)."""
INDEX = "model.safetensors.index.json"
EMBED_SUFFIX = "embed_tokens.weight"
HEAD_SUFFIX = "lm_head.weight"

Probe = Callable[[Sequence[int], Sequence[int]], "Fingerprint"]
"""(rows, columns) -> the model's fingerprint at those rows and columns."""


@dataclass(frozen=True)
class ModelIdentity:
    """Who a model is, as far as heads care: a name, its architecture and its two sizes."""

    name: str
    architecture: str | None
    model_type: str | None
    vocab_size: int
    hidden_size: int

    @property
    def kind(self) -> str:
        return self.architecture or self.model_type or "architecture unknown"

    def describe(self) -> str:
        return f"{self.name} ({self.kind}, vocabulary {self.vocab_size}, hidden size {self.hidden_size})"


@dataclass(frozen=True)
class Fingerprint:
    """The embedding's and the LM head's values at `rows` x `columns` (row-major, floats)."""

    rows: tuple[int, ...]
    columns: tuple[int, ...]
    embed_tokens: tuple[tuple[float, ...], ...]
    lm_head: tuple[tuple[float, ...], ...]


@dataclass(frozen=True)
class VerifierRecord:
    """The model heads draft for and the fingerprint of its embedding and LM head."""

    model: ModelIdentity
    tied: bool
    fingerprint: Fingerprint

    def to_json(self) -> dict[str, Any]:
        m, f = self.model, self.fingerprint
        return {"name": m.name, "architecture": m.architecture, "model_type": m.model_type,
                "vocab_size": m.vocab_size, "hidden_size": m.hidden_size, "tied_embeddings": self.tied,
                "fingerprint": {"rows": list(f.rows), "columns": list(f.columns),
                                "embed_tokens": [list(r) for r in f.embed_tokens], "lm_head": [list(r) for r in f.lm_head]}}

    @staticmethod
    def from_json(data: Mapping[str, Any], where: str) -> VerifierRecord:
        try:
            f = data["fingerprint"]
            model = ModelIdentity(str(data["name"]), data.get("architecture"), data.get("model_type"),
                                  int(data["vocab_size"]), int(data["hidden_size"]))
            fingerprint = Fingerprint(tuple(int(i) for i in f["rows"]), tuple(int(i) for i in f["columns"]),
                                      _matrix(f["embed_tokens"]), _matrix(f["lm_head"]))
            fingerprint_fits(fingerprint, model)
            return VerifierRecord(model, bool(data.get("tied_embeddings", False)), fingerprint)
        except (KeyError, TypeError, ValueError) as exc:
            raise EntMTPError(f"{where}: the {KEY!r} record is malformed ({exc!r}): re-export the heads") from None


def fingerprint_fits(fingerprint: Fingerprint, model: ModelIdentity) -> None:
    """`ValueError` unless the probe points lie inside the model's sizes and every matrix holds a
    value per row and column."""
    f = fingerprint
    if not all(0 <= r < model.vocab_size for r in f.rows) or not all(0 <= c < model.hidden_size for c in f.columns):
        raise ValueError("probe points outside the model's vocabulary or hidden size")
    if any(len(m) != len(f.rows) or any(len(row) != len(f.columns) for row in m) for m in (f.embed_tokens, f.lm_head)):
        raise ValueError("fingerprint values of another shape than its rows x columns")


def _matrix(values: Sequence[Sequence[float]]) -> tuple[tuple[float, ...], ...]:
    return tuple(tuple(float(v) for v in row) for row in values)


def probe_indices(size: int, count: int) -> tuple[int, ...]:
    """The centres of `count` equal bins of range(size) (all of it when smaller)."""
    count = min(count, size)
    return tuple((2 * i + 1) * size // (2 * count) for i in range(count))


def _values(rows: torch.Tensor, columns: Sequence[int]) -> tuple[tuple[float, ...], ...]:
    picked = rows.detach()[:, list(columns)].to("cpu", torch.float32)
    return tuple(tuple(float(f"{v:.6g}") for v in row) for row in picked.tolist())


def probe_tensors(embed: torch.Tensor, lm_head: torch.Tensor) -> Probe:
    """The fingerprint reader of weights in memory ([>= V, H] each, any dtype or device)."""

    def probe(rows: Sequence[int], columns: Sequence[int]) -> Fingerprint:
        index = torch.tensor(list(rows), device=embed.device)
        return Fingerprint(tuple(rows), tuple(columns), _values(embed.index_select(0, index), columns),
                           _values(lm_head.index_select(0, index.to(lm_head.device)), columns))

    return probe


def relative_difference(expected: Fingerprint, actual: Fingerprint) -> float:
    """max over the two matrices of ||actual - expected|| / ||expected|| (inf: other probe points)."""
    if (expected.rows, expected.columns) != (actual.rows, actual.columns):
        return float("inf")
    worst = 0.0
    for want, got in ((expected.embed_tokens, actual.embed_tokens), (expected.lm_head, actual.lm_head)):
        a, b = torch.tensor(want, dtype=torch.float64), torch.tensor(got, dtype=torch.float64)
        worst = max(worst, float((b - a).norm() / a.norm().clamp_min(1e-30)))
    return worst


def record_of(model: ModelIdentity, tied: bool, probe: Probe) -> VerifierRecord:
    """The record of `model` whose weights `probe` reads."""
    rows, columns = probe_indices(model.vocab_size, PROBE_ROWS), probe_indices(model.hidden_size, PROBE_COLUMNS)
    return VerifierRecord(model, tied, probe(rows, columns))


def model_name(model: str | Path) -> str:
    """A model's name for messages and records: a hub id as it is; a local folder's name, or for a
    folder of the Hugging Face cache (`models--org--name/snapshots/...`) its hub id."""
    path = Path(model)
    for part in path.parts:
        if part.startswith("models--"):
            return part.removeprefix("models--").replace("--", "/")
    return path.name if path.is_dir() else str(model)


def _get(config: Any, key: str) -> Any:
    return config.get(key) if isinstance(config, Mapping) else getattr(config, key, None)


def identity_of_config(config: Any, name: str, vocab_size: int | None = None, hidden_size: int | None = None) -> ModelIdentity:
    """The identity of a model from its config (a `config.json` dict or a config object; a
    multimodal one's `text_config` gives the sizes unless they are passed)."""
    text = _get(config, "text_config") or config
    architectures = _get(config, "architectures") or [None]
    vocab = vocab_size if vocab_size is not None else _get(text, "vocab_size")
    hidden = hidden_size if hidden_size is not None else _get(text, "hidden_size")
    if vocab is None or hidden is None:
        raise EntMTPError(f"the config of {name} gives no vocab_size or hidden_size: heads cannot be checked against it")
    return ModelIdentity(name, architectures[0], _get(config, "model_type"), int(vocab), int(hidden))


@dataclass(frozen=True)
class FolderWeights:
    """Where a Hugging Face folder keeps its embedding and LM head (safetensors file, key)."""

    config: dict[str, Any]
    embed: tuple[Path, str]
    lm_head: tuple[Path, str]
    tied: bool


def locate_weights(model_dir: str | Path) -> FolderWeights:
    """The embedding's and LM head's places in `model_dir`'s safetensors, read from the headers
    only (an index, when sharded); `EntMTPError` when the folder has none."""
    from safetensors import safe_open

    folder = Path(model_dir)
    if not (folder / "config.json").is_file():
        raise EntMTPError(f"{folder} has no config.json: pass a local model folder")
    config = json.loads((folder / "config.json").read_text())
    if (folder / INDEX).is_file():
        where = {key: folder / file for key, file in json.loads((folder / INDEX).read_text())["weight_map"].items()}
    else:
        where = {}
        for path in sorted(folder.glob("*.safetensors")):
            with safe_open(str(path), framework="pt") as handle:
                where.update((key, path) for key in handle.keys())
    embed = sorted((k for k in where if k.endswith(EMBED_SUFFIX)), key=len)
    if not embed:
        raise EntMTPError(f"{folder}: no {EMBED_SUFFIX} among its safetensors weights")
    head_keys = sorted((k for k in where if k == HEAD_SUFFIX or k.endswith("." + HEAD_SUFFIX)), key=len)
    tied = _get(_get(config, "text_config") or config, "tie_word_embeddings")
    tied = bool(tied if tied is not None else config.get("tie_word_embeddings", not head_keys))
    if not tied and not head_keys:
        raise EntMTPError(f"{folder}: its config unties the LM head but no {HEAD_SUFFIX} is among its safetensors weights")
    head = embed[0] if tied else head_keys[0]
    return FolderWeights(config, (where[embed[0]], embed[0]), (where[head], head), tied)


def has_safetensors(model_dir: str | Path) -> bool:
    """Whether a folder keeps its weights as safetensors (what `locate_weights` reads)."""
    return (Path(model_dir) / INDEX).is_file() or any(Path(model_dir).glob("*.safetensors"))


def _read_rows(place: tuple[Path, str], rows: Sequence[int]) -> torch.Tensor:
    from safetensors import safe_open

    with safe_open(str(place[0]), framework="pt") as handle:
        matrix = handle.get_slice(place[1])
        return torch.cat([matrix[r : r + 1] for r in rows])


def probe_folder(weights: FolderWeights) -> Probe:
    """The fingerprint reader of a Hugging Face folder: reads only the rows asked for."""

    def probe(rows: Sequence[int], columns: Sequence[int]) -> Fingerprint:
        embed = _read_rows(weights.embed, rows)
        head = embed if weights.lm_head == weights.embed else _read_rows(weights.lm_head, rows)
        return Fingerprint(tuple(rows), tuple(columns), _values(embed, columns), _values(head, columns))

    return probe


def record_of_folder(model_dir: str | Path, name: str | None = None) -> VerifierRecord:
    """The verifier record of the Hugging Face model in `model_dir` (name: the folder's)."""
    weights = locate_weights(model_dir)
    model = identity_of_config(weights.config, name or model_name(Path(model_dir).resolve()))
    return record_of(model, weights.tied, probe_folder(weights))


def record_in(heads_config: Mapping[str, Any], where: str) -> VerifierRecord | None:
    """The verifier record of a heads config (None: heads saved without one)."""
    data = heads_config.get(KEY)
    return None if data is None else VerifierRecord.from_json(data, where)


def missing_record(heads_config: Mapping[str, Any], heads: str) -> str:
    """The one-line warning for heads without a verifier record."""
    return (f"heads {heads} carry no {KEY!r} record in their config (trained for {heads_config.get('base_model')}): "
            "only their hidden and vocabulary sizes are checked against the model; re-export them with "
            "`entmtp train-heads` to record the model they draft for")


def check_model(record: VerifierRecord, model: ModelIdentity, probe: Probe, heads: str) -> float:
    """`relative_difference` of `model`'s weights from `record`; a one-line `EntMTPError` naming
    both models when they are not the same (other sizes, or a difference over `TOLERANCE`)."""
    trained = record.model
    advice = f"serve them with {trained.name}, or train heads for {model.name} with `entmtp train-heads --model ...`"
    if (model.vocab_size, model.hidden_size) != (trained.vocab_size, trained.hidden_size):
        raise EntMTPError(f"heads {heads} draft for {trained.describe()}, not for {model.describe()}: {advice}")
    difference = relative_difference(record.fingerprint, probe(record.fingerprint.rows, record.fingerprint.columns))
    if not difference <= TOLERANCE:
        raise EntMTPError(
            f"heads {heads} draft for {trained.name} ({trained.kind}), not for {model.name} ({model.kind}): "
            "the embedding and LM head differ from the "
            f"heads' verifier fingerprint (relative difference {difference:.3g} > {TOLERANCE}); {advice}"
        )
    return difference


def check_config(heads_config: Mapping[str, Any], heads: str,
                 target: Callable[[], tuple[ModelIdentity, Probe]]) -> str | None:
    """`check_model` against `target()` (the model and its fingerprint reader, asked for only when
    the heads have a record; a mismatch raises), else the `missing_record` warning to log."""
    record = record_in(heads_config, heads)
    if record is None:
        return missing_record(heads_config, heads)
    model, probe = target()
    check_model(record, model, probe, heads)
    return None


def check_loaded(heads_config: Mapping[str, Any], model: ModelIdentity, embed: torch.Tensor, lm_head: torch.Tensor,
                 heads: str) -> str | None:
    """`check_config` with a model's weights in memory (what a server has at start-up)."""
    return check_config(heads_config, heads, lambda: (model, probe_tensors(embed, lm_head)))


def check_folder(heads_config: Mapping[str, Any], model_dir: str | Path, heads: str) -> str | None:
    """`check_config` for a Hugging Face folder (its safetensors read in part), before it loads."""

    def target() -> tuple[ModelIdentity, Probe]:
        weights = locate_weights(model_dir)
        return identity_of_config(weights.config, model_name(Path(model_dir).resolve())), probe_folder(weights)

    return check_config(heads_config, heads, target)
