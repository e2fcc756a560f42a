"""Step-cost curves and banks for other hardware, without re-decoding.

Acceptance (τ of each tree) does not depend on the hardware; a step's cost does. A step-cost curve
is the time one target forward takes to verify n new tokens per request for a batch of B
requests after a context of C tokens, relative to verifying one token (the autoregressive step).
`measure_cost_curve` times it on the machine it runs on for a model *shape*: random weights time
like real ones, so a 7B curve needs only a GPU, not the 7B checkpoint. `rerank` combines a
frontier bank's τ with a curve: a tree of n nodes (root included) is predicted to decode at

    speedup over AR = τ / cost(B, n),   cost(B, n) = ms(B, n) / ms(B, 1)

which leaves out the draft heads' own cost (small next to the target on a GPU; on a CPU they are
the heads' 1-3 ms per step, so the CPU throughput stage, which times whole decodes, stays the
reference there). The throughput-Pareto trees under that prediction form the bank for that
hardware (`bank_<label>.json`, static policy on the best tree).

Only torch and transformers are needed (the GPU check machine has no vLLM), and no weights.
"""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from entmtp_vllm.errors import EntMTPError

MODEL_SHAPES: dict[str, dict[str, int]] = {
    "smollm2-135m": dict(hidden_size=576, intermediate_size=1536, num_hidden_layers=30, num_attention_heads=9,
                         num_key_value_heads=3, vocab_size=49152, head_dim=64),
    "llama-7b": dict(hidden_size=4096, intermediate_size=11008, num_hidden_layers=32, num_attention_heads=32,
                     num_key_value_heads=32, vocab_size=32000, head_dim=128),
}
"""Named Llama shapes: the embedded model's, and Llama-2-7B's (Hydra's and Medusa's target)."""

CURVE_FORMAT = "entmtp-cost-curve"


def model_shape(spec: str) -> tuple[str, dict[str, int]]:
    """(label, Llama config fields) of a named shape or of a model folder's `config.json`."""
    if spec in MODEL_SHAPES:
        return spec, dict(MODEL_SHAPES[spec])
    path = Path(spec)
    config_file = path / "config.json" if path.is_dir() else path
    try:
        config = json.loads(config_file.read_text())
    except (OSError, ValueError):
        raise EntMTPError(
            f"model shape {spec!r}: neither a named shape ({', '.join(MODEL_SHAPES)}) nor a readable config.json"
        ) from None
    config = config.get("text_config", config)
    keys = ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads", "vocab_size")
    missing = [key for key in keys if key not in config]
    if missing:
        raise EntMTPError(f"{config_file}: not a Llama-like config (missing {', '.join(missing)})")
    shape = {key: int(config[key]) for key in keys}
    shape["num_key_value_heads"] = int(config.get("num_key_value_heads") or shape["num_attention_heads"])
    shape["head_dim"] = int(config.get("head_dim") or shape["hidden_size"] // shape["num_attention_heads"])
    return path.name or spec, shape


@dataclass(frozen=True)
class CostCurve:
    """Measured ms per verification step, by (batch, tokens per request)."""

    label: str
    points: dict[tuple[int, int], float]
    meta: dict[str, Any]

    @property
    def batches(self) -> list[int]:
        return sorted({b for b, _ in self.points})

    def relative(self, batch: int, tokens: int) -> float:
        """ms(batch, tokens) / ms(batch, 1), linear between measured token counts."""
        if batch not in self.batches:
            raise EntMTPError(f"cost curve {self.label}: no batch {batch} measured (have {self.batches})")
        measured = sorted((n, ms) for (b, n), ms in self.points.items() if b == batch)
        base = dict(measured).get(1)
        if base is None:
            raise EntMTPError(f"cost curve {self.label}: batch {batch} has no 1-token point")
        if tokens > measured[-1][0]:
            raise EntMTPError(
                f"cost curve {self.label}: {tokens} tokens is beyond the measured {measured[-1][0]}; "
                "measure more --tokens"
            )
        for (n0, ms0), (n1, ms1) in zip(measured, measured[1:]):
            if n0 <= tokens <= n1:
                return (ms0 + (ms1 - ms0) * (tokens - n0) / (n1 - n0)) / base
        return dict(measured)[tokens] / base

    def to_json(self) -> dict[str, Any]:
        return {
            "format": CURVE_FORMAT,
            "label": self.label,
            **self.meta,
            "points": [{"batch": b, "tokens": n, "ms": ms} for (b, n), ms in sorted(self.points.items())],
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "CostCurve":
        if data.get("format") != CURVE_FORMAT:
            raise EntMTPError(f"not an {CURVE_FORMAT} file (format {data.get('format')!r})")
        meta = {k: v for k, v in data.items() if k not in ("format", "label", "points")}
        points = {(int(p["batch"]), int(p["tokens"])): float(p["ms"]) for p in data["points"]}
        return cls(data["label"], points, meta)


def load_curve(path: str | Path) -> CostCurve:
    try:
        return CostCurve.from_json(json.loads(Path(path).read_text()))
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise EntMTPError(f"cost curve {path}: cannot read it ({exc})") from None


def measure_cost_curve(
    shape_spec: str,
    tokens: Sequence[int] = (1, 2, 4, 8, 16, 32, 64),
    batches: Sequence[int] = (1,),
    context: int = 512,
    dtype: str = "bfloat16",
    device: str | None = None,
    repeats: int = 5,
    seed: int = 0,
    progress: bool = True,
) -> CostCurve:
    """Time one target forward over `tokens` new tokens per request, for each batch size, after a
    `context`-token prefix in the KV cache (median of `repeats`, after one warm-up call)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM
    from transformers.cache_utils import DynamicCache

    if 1 not in tokens:
        raise EntMTPError("--tokens must include 1 (the autoregressive step every cost is relative to)")
    if min(tokens) < 1 or min(batches) < 1 or context < 1 or repeats < 1:
        raise EntMTPError("--tokens, --batches, --context and --repeats must be positive")
    label, shape = model_shape(shape_spec)
    torch_dtype = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}.get(dtype)
    if torch_dtype is None:
        raise EntMTPError(f"--dtype {dtype!r}: use bfloat16, float16 or float32")
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    torch.manual_seed(seed)
    config = LlamaConfig(**shape, max_position_embeddings=context + max(tokens) + 8, tie_word_embeddings=False)
    model = LlamaForCausalLM(config).to(device=device, dtype=torch_dtype).eval()
    synchronize = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)
    points: dict[tuple[int, int], float] = {}
    todo = [(b, n) for b in batches for n in tokens]
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=len(todo), desc=f"cost curve {label}", unit="point")
    with torch.inference_mode():
        for batch in batches:
            prefix = torch.randint(0, shape["vocab_size"], (batch, context), device=device)
            cache = DynamicCache()
            model(prefix, past_key_values=cache, use_cache=True)
            for n in tokens:
                new = torch.randint(0, shape["vocab_size"], (batch, n), device=device)
                position = torch.arange(context, context + n, device=device).expand(batch, n)
                times = []
                for i in range(repeats + 1):
                    synchronize()
                    start = time.perf_counter()
                    model(new, past_key_values=cache, position_ids=position, use_cache=True, logits_to_keep=n)
                    synchronize()
                    if i:  # the first call warms up
                        times.append((time.perf_counter() - start) * 1e3)
                    cache.crop(-n)  # back to the context (a negative length removes tokens)
                points[(batch, n)] = statistics.median(times)
                if bar is not None:
                    bar.update()
    if bar is not None:
        bar.close()
    meta = {
        "shape": shape, "context": context, "dtype": dtype, "device": device, "repeats": repeats,
        "device_name": torch.cuda.get_device_name() if device.startswith("cuda") else _cpu_name(),
        "torch_threads": torch.get_num_threads(),
    }
    return CostCurve(label, points, meta)


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "cpu"


def rerank(bank: Any, curve: CostCurve, batch: int = 1) -> list[dict[str, Any]]:
    """Each tree of `bank` (an `entmtp-bank` with measured τ) with its predicted cost and
    speedup over AR on `curve`, fastest first; `pareto` marks the throughput-Pareto trees."""
    rows = []
    for tree in bank.trees:
        if tree.measured is None:
            raise EntMTPError(f"tree {tree.name!r} has no measured accept length: rerank needs a frontier bank")
        nodes = tree.measured.nodes
        cost = curve.relative(batch, nodes)
        rows.append({"name": tree.name, "nodes": nodes, "tau": tree.measured.accept_length, "cost": cost,
                     "speedup": tree.measured.accept_length / cost})
    best = 0.0
    for row in sorted(rows, key=lambda r: (r["nodes"], -r["speedup"])):
        row["pareto"] = row["speedup"] > best
        best = max(best, row["speedup"])
    return sorted(rows, key=lambda r: -r["speedup"])


def rerank_markdown(rows: list[dict[str, Any]], curve: CostCurve, batch: int, bank_path: str) -> str:
    meta = curve.meta
    lines = [
        f"# Trees of {bank_path} re-ranked for {curve.label} on {meta.get('device_name', meta.get('device'))}",
        "",
        f"Step-cost curve: {meta.get('dtype')}, context {meta.get('context')}, batch {batch}, median of "
        f"{meta.get('repeats')} timings per point. Predicted speedup over AR = τ / cost(n), cost(n) = "
        "ms(verify n tokens) / ms(verify 1); the heads' own cost is left out.",
        "",
        "| tree | nodes | τ | cost(n) | predicted × AR | Pareto |",
        "|---|---:|---:|---:|---:|---|",
    ]
    for row in rows:
        lines.append(f"| {row['name']} | {row['nodes']} | {row['tau']:.3f} | {row['cost']:.3f} | "
                     f"{row['speedup']:.3f} | {'yes' if row['pareto'] else ''} |")
    return "\n".join(lines) + "\n"


def rerank_bank(bank_path: str, curve_path: str, out: str, batch: int = 1) -> dict[str, str]:
    """Write `<out>/rerank_<label>.md/.json` and `<out>/bank_<label>.json` (the Pareto trees,
    static policy on the predicted fastest)."""
    from entmtp_vllm.bank_file import BankFile, load_bank, save_bank

    bank = load_bank(bank_path)
    curve = load_curve(curve_path)
    rows = rerank(bank, curve, batch)
    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    label = f"{curve.label}-{curve.meta.get('device', 'device')}-b{batch}"
    kept = {row["name"] for row in rows if row["pareto"]}
    best = rows[0]["name"]
    trees = [tree for tree in bank.trees if tree.name in kept]
    metadata = {**(bank.metadata or {}), "cost_curve": str(curve_path), "cost_curve_batch": batch,
                "reranked_from": str(bank_path)}
    new_bank = BankFile.model_validate({
        **bank.model_dump(mode="json", exclude={"created"}), "trees": [tree.model_dump(mode="json") for tree in trees],
        "policy": {"kind": "static", "tree": best}, "metadata": metadata,
    })
    paths = {
        "markdown": str(folder / f"rerank_{label}.md"),
        "json": str(folder / f"rerank_{label}.json"),
        "bank": str(folder / f"bank_{label}.json"),
    }
    Path(paths["markdown"]).write_text(rerank_markdown(rows, curve, batch, bank_path), encoding="utf-8")
    Path(paths["json"]).write_text(json.dumps({"bank": bank_path, "curve": curve.to_json(), "batch": batch,
                                               "rows": rows}, indent=1), encoding="utf-8")
    save_bank(new_bank, paths["bank"])
    return paths
