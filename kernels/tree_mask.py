"""The packed tree-mask layout of `paged_tree_attention`: one bit per (node, visible node).

Row (b, i) of the int32 [sum n_b, W] mask holds request b's node i; bit j % 32 of word j // 32 says
node j of the same request is visible to node i (self and ancestors). Any tree with at most 32·W
nodes fits.
"""

import math

import torch


def pack_tree_mask(bool_masks: list[torch.Tensor]) -> torch.Tensor:
    """Pack per-request ancestor masks into the kernel's bit layout.

    `bool_masks[b]` is a bool [n_b, n_b] tensor, `[i, j]` true when node j is visible to node i.
    Returns int32 [sum n_b, W], W = ceil(max n_b / 32) (at least 1), on the first mask's device:
    bit j % 32 of word j // 32 of row (b, i) is `bool_masks[b][i, j]`.
    """
    if not bool_masks:
        raise ValueError("pack_tree_mask: empty list of masks")
    for mask in bool_masks:
        if mask.dim() != 2 or mask.shape[0] != mask.shape[1] or mask.dtype != torch.bool:
            raise ValueError(
                f"pack_tree_mask: each mask must be a square bool tensor, got {tuple(mask.shape)} "
                f"{mask.dtype}"
            )
    device = bool_masks[0].device
    words = max(1, math.ceil(max(m.shape[0] for m in bool_masks) / 32))
    bit_values = torch.bitwise_left_shift(torch.ones(32, dtype=torch.int64, device=device),
                                          torch.arange(32, device=device))
    rows = []
    for mask in bool_masks:
        n = mask.shape[0]
        padded = torch.zeros(n, words * 32, dtype=torch.int64, device=device)
        padded[:, :n] = mask.to(device=device, dtype=torch.int64)
        packed = (padded.view(n, words, 32) * bit_values).sum(-1)  # in [0, 2^32)
        rows.append(torch.where(packed >= 2**31, packed - 2**32, packed))  # as signed int32
    return torch.cat(rows).to(torch.int32)


def unpack_tree_mask(words: torch.Tensor, num_nodes: int) -> torch.Tensor:
    """Inverse of `pack_tree_mask` for one request: int32 [n, W] rows → bool [n, num_nodes]."""
    j = torch.arange(num_nodes, device=words.device)
    return ((words[:, j // 32] >> (j % 32)) & 1).bool()
