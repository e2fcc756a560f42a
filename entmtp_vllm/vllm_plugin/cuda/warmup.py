"""Compile the tree step's Triton kernels when the worker starts, not in the first served step.

Triton compiles a kernel the first time it is launched with a new set of compile-time constants
(dtype, head size, soft-cap, split-KV or not) and integer specializations. `warm_up_kernels`
makes, for every distinct (cache dtype, head size, query / KV heads, soft-cap) of the model's
decoder layers, the launches `entmtp_kernels.warm_up_launches` lists (tree attention in one pass
and split over the KV range, which compiles the combine kernel too, and compaction), on tiny
inputs over the real caches so that the cache strides get the specialization serving gives them.
The integer arguments that change from step to step are not specialized
(`entmtp_kernels.configs`), so these launches compile exactly what serving launches. Nothing is
written to the caches: the attention writes a scratch output, the compaction moves no row.
"""

from __future__ import annotations

import time
from typing import Any

import torch
from vllm.v1.attention.backend import AttentionType

from entmtp_vllm.vllm_plugin.cuda.kernels import compact_kv_gpu, split_kv

WARM_UP_NODES = 2
"""Tree nodes of the warm-up launches (a root and one child)."""


def _layers(runner: Any) -> dict[tuple, Any]:
    """One decoder attention layer per distinct kernel shape the model needs."""
    context = runner.compilation_config.static_forward_context
    shapes: dict[tuple, Any] = {}
    for groups in runner.attn_groups:
        for group in groups:
            for name in group.layer_names:
                layer = context[name]
                impl = getattr(layer, "impl", None)
                if impl is None or impl.attn_type != AttentionType.DECODER or layer.kv_cache.numel() == 0:
                    continue
                key = (layer.kv_cache.dtype, impl.head_size, impl.num_heads, impl.num_kv_heads,
                       float(impl.logits_soft_cap or 0.0))
                shapes.setdefault(key, layer)
    return shapes


def _attention(kernels: Any, layer: Any, launches: list) -> None:
    impl = layer.impl
    key_cache, value_cache = split_kv(layer.kv_cache, impl.head_size)
    device = key_cache.device
    query = torch.zeros(WARM_UP_NODES, impl.num_heads, impl.head_size, dtype=key_cache.dtype, device=device)
    tree = torch.tril(torch.ones(WARM_UP_NODES, WARM_UP_NODES, dtype=torch.bool))
    inputs = dict(
        block_tables=torch.zeros(1, 1, dtype=torch.int32, device=device),  # block 0: vLLM's null block
        query_start_loc=torch.tensor([0, WARM_UP_NODES], dtype=torch.int32, device=device),
        prefix_lens=torch.zeros(1, dtype=torch.int32, device=device),
        tree_mask=kernels.pack_tree_mask([tree]).to(device),
        scale=impl.scale,
        max_query_len=WARM_UP_NODES,
    )
    for launch in launches:
        if launch.op == "paged_tree_attention":
            kernels.paged_tree_attention(query, key_cache, value_cache, **inputs, **launch.kwargs)


def warm_up_kernels(runner: Any) -> str:
    """Make every kernel launch the runner's model needs once; returns the line to log."""
    import entmtp_kernels as kernels

    started = time.perf_counter()
    compiled: list[str] = []
    for (dtype, head_size, _, _, softcap), layer in _layers(runner).items():
        launches = kernels.warm_up_launches(dtype, head_size, softcap)
        _attention(kernels, layer, launches)
        compiled += [name for launch in launches if launch.op == "paged_tree_attention" for name in launch.compiles]
    if runner.kv_caches:
        device = runner.kv_caches[0].device
        # a one-node path: the launch compiles the compaction kernel and moves nothing
        compact_kv_gpu(runner.kv_caches, [[0]], [0], torch.zeros(1, 1, dtype=torch.int32, device=device))
        compiled.append(kernels.configs.COMPACT_VARIANT_NAME)
        if device.type == "cuda":
            torch.cuda.synchronize(device)  # the launches above have run (and compiled)
    return (f"EntMTP compiled its Triton kernels in {time.perf_counter() - started:.1f} s before serving: "
            + (", ".join(dict.fromkeys(compiled)) or "none (no decoder attention layer)"))
