"""How large a KV cache a CPU vLLM server can have on this machine.

vLLM's CPU worker (0.32.0, `v1/worker/cpu_worker.py`) reserves `--gpu-memory-utilization`
(default 0.92) of the memory of its NUMA node and refuses to start unless that much is
available, unless `--kv-cache-memory-bytes` (or the legacy `VLLM_CPU_KVCACHE_SPACE`, GiB) gives
the cache's size. On a machine whose node 0 holds a third of the memory, or that runs anything
else, the default never starts. `entmtp serve` therefore sizes the cache itself
(`auto_kv_cache_bytes`) from the model's shape and the node's available memory, and checks sizes
the user gave (`check_explicit_memory`) against the same reading, so that a size the machine
cannot hold is one line naming the setting, the memory there is and a value that fits.

Memory is read as vLLM reads it (`utils/cpu_resource_utils.get_memory_node_info`): the node's
MemFree + Active(file) + Inactive(file) + SReclaimable, clamped by the cgroup limit. No vLLM
import: the front door runs before vLLM starts.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

from entmtp_vllm.config import KV_CACHE_SIZING, KVCacheSizing
from entmtp_vllm.errors import EntMTPError

GIB = 2**30

_DTYPE_BYTES = {"float32": 4, "float": 4, "float16": 2, "half": 2, "bfloat16": 2}


@dataclass(frozen=True)
class NodeMemory:
    """Memory of the NUMA node the vLLM CPU worker binds to, at the time of reading."""

    node: int
    total: int
    """Bytes (MemTotal, or the cgroup limit when lower)."""
    available: int
    """Bytes vLLM counts as available there."""

    def describe(self) -> str:
        return f"{self.available / GIB:.2f} of {self.total / GIB:.2f} GiB available on NUMA node {self.node}"


def _read_meminfo(path: Path, per_node: bool) -> dict[str, int]:
    values = {}
    for line in path.read_text().splitlines():
        parts = line.split()
        if per_node:  # "Node 0 MemTotal:  8218396 kB"
            parts = parts[2:]
        if len(parts) >= 2:
            values[parts[0].rstrip(":")] = int(parts[1]) * 1024
    return values


def _cgroup_bytes(cgroup: Path, name: str) -> int | None:
    try:
        text = (cgroup / name).read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def worker_node() -> int:
    """The NUMA node of the first CPU this process may run on (where vLLM's worker binds)."""
    first = min(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 0
    for link in Path("/sys/devices/system/cpu", f"cpu{first}").glob("node*"):
        suffix = link.name.removeprefix("node")
        if suffix.isdigit():
            return int(suffix)
    return 0


def node_memory(
    node: int | None = None, root: Path = Path("/sys/devices/system/node"), cgroup: Path = Path("/sys/fs/cgroup")
) -> NodeMemory:
    """The worker node's memory as vLLM's CPU worker reads it (whole machine without NUMA info)."""
    node = worker_node() if node is None else node
    path = root / f"node{node}" / "meminfo"
    if path.is_file():
        info = _read_meminfo(path, per_node=True)
        available = info["MemFree"] + info.get("Active(file)", 0) + info.get("Inactive(file)", 0)
        available += info.get("SReclaimable", 0)
    else:
        info = _read_meminfo(Path("/proc/meminfo"), per_node=False)
        available = info.get("MemAvailable", info["MemFree"])
    total = info["MemTotal"]
    limit = _cgroup_bytes(cgroup, "memory.max")
    if limit is not None and limit < total:
        total = limit
        available = max(0, min(available, limit - (_cgroup_bytes(cgroup, "memory.current") or 0)))
    return NodeMemory(node=node, total=total, available=available)


def parse_size(text: str, option: str) -> int:
    """A byte count in vLLM's human-readable form: `2147483648`, `2G` (2^30), `2g` (10^9), `1.5G`."""
    value = text.strip()
    match = re.fullmatch(r"(\d+(?:\.\d+)?)([kKmMgGtT]?)", value)
    if match is None:
        raise EntMTPError(f"{option} {text!r}: not a size (bytes, or a number with k/M/G/T, e.g. 2G)")
    number, suffix = match.groups()
    if not suffix:
        if "." in number:
            raise EntMTPError(f"{option} {text!r}: a byte count must be whole")
        return int(number)
    scale = {"k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}[suffix] if suffix.islower() else (
        {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}[suffix]
    )
    return int(float(number) * scale)


def format_size(num_bytes: int) -> str:
    """A size vLLM's `--kv-cache-memory-bytes` accepts, rounded down to whole MiB."""
    return f"{num_bytes // 2**20}M"


@dataclass(frozen=True)
class ModelShape:
    """What the KV cache of one token costs, and the longest sequence vLLM will serve."""

    num_layers: int
    num_kv_heads: int
    head_dim: int
    dtype_bytes: int
    max_model_len: int

    @property
    def bytes_per_token(self) -> int:
        return 2 * self.num_layers * self.num_kv_heads * self.head_dim * self.dtype_bytes


def model_shape(
    model: str, dtype: str | None = None, max_model_len: int | None = None, kv_cache_dtype: str | None = None
) -> ModelShape | None:
    """The KV shape of a local model folder (its `config.json`); None for a hub id or an
    unreadable config (then the size falls back to the memory share alone)."""
    path = Path(model) / "config.json"
    try:
        config = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    config = config.get("text_config", config)
    try:
        num_layers = int(config["num_hidden_layers"])
        num_heads = int(config["num_attention_heads"])
        num_kv_heads = int(config.get("num_key_value_heads") or num_heads)
        head_dim = int(config.get("head_dim") or int(config["hidden_size"]) // num_heads)
    except (KeyError, TypeError, ValueError):
        return None
    if kv_cache_dtype and kv_cache_dtype.startswith("fp8"):
        dtype_bytes = 1
    elif dtype not in (None, "auto"):
        dtype_bytes = _DTYPE_BYTES.get(dtype, 4)
    else:
        # vLLM's "auto" keeps a 16-bit config dtype and downcasts float32 models to the platform's
        # preferred 16-bit type (`config/model.py`, "Downcast for float32 models").
        dtype_bytes = 2
    length = max_model_len or int(config.get("max_position_embeddings") or 2048)
    return ModelShape(num_layers, num_kv_heads, head_dim, dtype_bytes, length)


def auto_kv_cache_bytes(
    shape: ModelShape | None, memory: NodeMemory, sizing: KVCacheSizing = KV_CACHE_SIZING
) -> tuple[int, str]:
    """(bytes, why): the KV cache `entmtp serve` asks vLLM for when the user gives no size.

    `sizing.share_of_available` of the node's available memory, but no more than
    `sizing.full_sequences` sequences of `max_model_len` tokens; an error when not even one such
    sequence fits (naming a `--max-model-len` that would)."""
    budget = int(memory.available * sizing.share_of_available)
    if shape is None:
        return budget, f"{sizing.share_of_available:g} of the {memory.describe()} (model shape unknown)"
    one_sequence = shape.bytes_per_token * shape.max_model_len
    if one_sequence > budget:
        fits = budget // shape.bytes_per_token
        raise EntMTPError(
            f"the KV cache of one {shape.max_model_len}-token sequence needs {one_sequence / GIB:.2f} GiB, but "
            f"only {budget / GIB:.2f} GiB of the {memory.describe()} can go to it: pass -- --max-model-len {fits} "
            "(or less), or free memory"
        )
    wanted = one_sequence * sizing.full_sequences
    if wanted <= budget:
        return wanted, (
            f"{sizing.full_sequences} sequences of {shape.max_model_len} tokens at "
            f"{shape.bytes_per_token} bytes a token ({memory.describe()})"
        )
    sequences = budget / one_sequence
    return budget, (
        f"{sizing.share_of_available:g} of the {memory.describe()}: {sequences:.1f} sequences of "
        f"{shape.max_model_len} tokens"
    )


def check_explicit_memory(
    kv_cache_bytes: int | None, utilization: float | None, memory: NodeMemory, source: str = "--kv-cache-memory-bytes"
) -> None:
    """One-line error when a size the user gave cannot be held on this machine.

    `kv_cache_bytes` (from `source`) is checked against the available memory; otherwise
    `utilization` (`--gpu-memory-utilization`: on CPU, the share of the node vLLM reserves and
    requires free) against it as vLLM's CPU worker checks it."""
    budget = int(memory.available * KV_CACHE_SIZING.share_of_available)
    if kv_cache_bytes is not None:
        if kv_cache_bytes > memory.available:
            raise EntMTPError(
                f"{source} asks for a {kv_cache_bytes / GIB:.2f} GiB KV cache, but there is only "
                f"{memory.describe()}: use {format_size(budget)} or less (or leave it out: entmtp serve sizes "
                "the cache itself)"
            )
        return
    if utilization is not None:
        if not 0 < utilization <= 1:
            raise EntMTPError(f"--gpu-memory-utilization {utilization:g}: must be in (0, 1]")
        needed = utilization * memory.total
        if needed > memory.available:
            fits = int(memory.available / memory.total * 0.9 * 100) / 100
            raise EntMTPError(
                f"--gpu-memory-utilization {utilization:g} makes vLLM's CPU worker require "
                f"{needed / GIB:.2f} GiB free, but there is only {memory.describe()}: use "
                f"--gpu-memory-utilization {fits:g} or less (or leave it out: entmtp serve then sizes the KV "
                "cache itself)"
            )
