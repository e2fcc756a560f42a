"""GPU path: the plugin's tree step mapped onto the `entmtp_kernels` Triton kernels.

NOT WIRED into vLLM yet, and untested on a GPU here: no GPU worker/runner subclass and no
`FLASH_ATTN` backend override exist. What a GPU integration would call, with vLLM's GPU KV cache
layout (one `[2, num_blocks, block_size, Hkv, D]` tensor per layer, the kernels' layout):

- after the stock attention of a layer, `tree_rows_attention_gpu` recomputes the rows of the
  tree requests with `paged_tree_attention` (prefix fully visible, tree part from packed
  ancestor masks) and writes them into the layer's output;
- after verification, `compact_kv_gpu` moves every request's accepted path next to its prefix
  in all layers' caches with one `compact_kv` launch.

Both take the same `TreeStep` the CPU backend uses, so the runner code is shared. The kernel
function is a parameter (default: the Triton kernel) so the plumbing is tested on CPU against
the torch references (`tests/vllm_plugin/test_gpu_plumbing.py`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from entmtp_vllm.vllm_plugin.attention import TreeStep


def _kernels():
    import entmtp_kernels

    return entmtp_kernels


def tree_rows_attention_gpu(
    step: TreeStep,
    query: torch.Tensor,
    kv_cache: torch.Tensor,
    seq_lens: torch.Tensor,
    block_table: torch.Tensor,
    scale: float,
    output: torch.Tensor,
    kernel: Callable | None = None,
) -> None:
    """Overwrite `output` rows [T, Hq, D] of the tree requests with tree attention.

    `kv_cache`: [2, num_blocks, block_size, Hkv, D]; `seq_lens`, `block_table`: the batch's.
    """
    kernels = _kernels()
    kernel = kernel or kernels.paged_tree_attention
    device = query.device
    rows = step.token_rows[step.node_valid].to(device)
    sizes = step.num_nodes.to(device)
    query_start_loc = torch.zeros(sizes.numel() + 1, dtype=torch.int32, device=device)
    query_start_loc[1:] = torch.cumsum(sizes, 0)
    batch_rows = step.batch_rows.to(device)
    prefix_lens = (seq_lens[batch_rows].to(torch.int64) - sizes).to(torch.int32)
    masks = [step.tree_mask[r, :n, :n] for r, n in enumerate(step.num_nodes.tolist())]
    packed = kernels.pack_tree_mask(masks).to(device)
    key_cache, value_cache = kv_cache.unbind(0)
    extra = {"max_query_len": int(step.num_nodes.max())} if kernel is kernels.paged_tree_attention else {}
    result = kernel(
        query[rows], key_cache, value_cache, block_table[batch_rows].to(torch.int32), query_start_loc,
        prefix_lens, packed, scale, **extra,
    )
    output[rows] = result.to(output.dtype)


def compact_kv_gpu(
    kv_caches: Sequence[torch.Tensor],
    accepted: Sequence[Sequence[int]],
    prefix_lens: Sequence[int],
    block_tables: torch.Tensor,
    kernel: Callable | None = None,
) -> None:
    """Move request b's accepted nodes `accepted[b]` (root first) to positions prefix + i.

    `kv_caches`: every layer's `[2, num_blocks, block_size, Hkv, D]` cache; `block_tables`:
    the rows of the requests in `accepted`. Requests whose path needs no move may be left out.
    """
    if not accepted:
        return
    kernels = _kernels()
    kernel = kernel or kernels.compact_kv
    device = block_tables.device
    flat = [node for path in accepted for node in path]
    starts = [0]
    for path in accepted:
        starts.append(starts[-1] + len(path))
    caches = [half for cache in kv_caches for half in cache.unbind(0)]
    kernel(
        caches,
        torch.tensor(flat, dtype=torch.int32, device=device),
        torch.tensor(starts, dtype=torch.int32, device=device),
        torch.tensor(list(prefix_lens), dtype=torch.int32, device=device),
        block_tables.to(torch.int32),
    )
