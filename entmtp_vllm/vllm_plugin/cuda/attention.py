"""Tree attention on vLLM's CUDA backends (FLASH_ATTN, TRITON_ATTN), from a plugin.

`TreeFlashAttentionBackend` and `TreeTritonAttentionBackend` subclass the stock backends (the
general plugin installs them with `register_backend`, `install.py`). Their impls run the stock
kernel for every row, then, when the step's metadata carries a `TreeStep` (the runner attaches
it), overwrite the rows of the requests verifying a branching tree with `paged_tree_attention`:
the prefix fully visible, inside the tree only the node and its ancestors (packed masks, built
once per step), with the layer's logits soft-cap, read from vLLM's own cache in place
(`kernels.split_kv`). vLLM's backends write the
step's K/V into the cache before attention (`forward_includes_kv_cache_update = False`), so
every node's K/V is in the cache when the tree rows are recomputed. Chains and ordinary rows
keep the stock kernel's result. The stock kernel's work on tree rows is wasted (it exposes no
per-row mask); a fused kernel would avoid it.

Attention runs outside vLLM's piecewise CUDA graphs, so the tree rows run eagerly under the
default compilation; vLLM's FULL graphs (attention inside) are never replayed for a step with tree
rows (`EntMTPGPUModelRunner._determine_batch_execution_and_padding`). Written against vLLM 0.32.0
and tested on CPU (the same functions on vLLM's cache layouts, the Triton kernel under the
interpreter, and a whole CPU engine on vLLM's Triton attention under the interpreter); not yet
run inside vLLM on a GPU.
"""

from __future__ import annotations

from vllm.v1.attention.backend import AttentionType
from vllm.v1.attention.backends.flash_attn import FlashAttentionBackend, FlashAttentionImpl
from vllm.v1.attention.backends.triton_attn import TritonAttentionBackend, TritonAttentionImpl

from entmtp_vllm.vllm_plugin.cuda.kernels import split_kv, tree_rows_attention_gpu
from entmtp_vllm.vllm_plugin.tree_step import tree_step_of

def apply_tree_rows(impl, query, kv_cache, attn_metadata, output) -> None:
    """After the stock forward: the tree requests' rows with their tree masks (no-op without)."""
    step = tree_step_of(attn_metadata)
    if step is None or not step.has_tree_rows or impl.attn_type != AttentionType.DECODER:
        return
    key_cache, value_cache = split_kv(kv_cache, impl.head_size)
    tree_rows_attention_gpu(
        step, query, key_cache, value_cache, attn_metadata.seq_lens, attn_metadata.block_table, impl.scale, output,
        softcap=float(impl.logits_soft_cap or 0.0),
    )


class _TreeRows:
    """The stock impl's forward, then the tree rows (mixed in before a stock impl class)."""

    def forward(self, layer, query, key, value, kv_cache, attn_metadata, output, output_scale=None,
                output_block_scale=None):
        result = super().forward(layer, query, key, value, kv_cache, attn_metadata, output, output_scale,
                                 output_block_scale)
        apply_tree_rows(self, query, kv_cache, attn_metadata, output)
        return result


class TreeFlashAttentionImpl(_TreeRows, FlashAttentionImpl):
    """FLASH_ATTN's impl with EntMTP's tree rows."""


class TreeTritonAttentionImpl(_TreeRows, TritonAttentionImpl):
    """TRITON_ATTN's impl with EntMTP's tree rows."""


class TreeFlashAttentionBackend(FlashAttentionBackend):
    """FLASH_ATTN with per-request tree masks for EntMTP's tree rows."""

    entmtp_tree_backend = True

    @staticmethod
    def get_impl_cls() -> type[TreeFlashAttentionImpl]:
        return TreeFlashAttentionImpl


class TreeTritonAttentionBackend(TritonAttentionBackend):
    """TRITON_ATTN with per-request tree masks for EntMTP's tree rows."""

    entmtp_tree_backend = True

    @staticmethod
    def get_impl_cls() -> type[TreeTritonAttentionImpl]:
        return TreeTritonAttentionImpl


