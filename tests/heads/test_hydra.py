"""Tests for entmtp_vllm/heads/hydra.py and heads/blocks.py (tiny random dims)."""

from __future__ import annotations

import subprocess
import sys

import torch
import torch.nn.functional as F

from entmtp_vllm.heads import HydraHeads, PrefixLayerConfig, make_heads
from entmtp_vllm.heads.blocks import PrefixCache, PrefixLayer

from conftest import HIDDEN, VOCAB, randomize


def test_fresh_heads_reproduce_the_base_lm_head(base_weights) -> None:
    embed, lm_head = base_weights
    heads = HydraHeads(HIDDEN, VOCAB, num_heads=3, num_layers=2)
    h = torch.randn(5, HIDDEN)
    path = embed[torch.randint(VOCAB, (5, 3))]
    for d in (1, 2, 3):
        torch.testing.assert_close(heads.head_logits(d, h, path, lm_head), h @ lm_head.T)


def test_head_d_sees_exactly_d_path_tokens(base_weights) -> None:
    embed, lm_head = base_weights
    heads = randomize(HydraHeads(HIDDEN, VOCAB, num_heads=3, num_layers=1))
    h = torch.randn(2, HIDDEN)
    path = embed[torch.randint(VOCAB, (2, 3))]
    changed_last = path.clone()
    changed_last[:, 2] += 1.0
    changed_first = path.clone()
    changed_first[:, 0] += 1.0
    # head 2 reads tokens 1..2 only
    torch.testing.assert_close(heads.head_logits(2, h, path, lm_head), heads.head_logits(2, h, changed_last, lm_head))
    assert not torch.allclose(heads.head_logits(2, h, path, lm_head), heads.head_logits(2, h, changed_first, lm_head))
    assert not torch.allclose(heads.head_logits(3, h, path, lm_head), heads.head_logits(3, h, changed_last, lm_head))


def test_head_matches_plain_formula(base_weights) -> None:
    embed, lm_head = base_weights
    heads = randomize(HydraHeads(HIDDEN, VOCAB, num_heads=2, num_layers=2))
    h = torch.randn(3, HIDDEN)
    path = embed[torch.randint(VOCAB, (3, 2))]
    inp, blk = heads.inputs[1], heads.stacks[1].blocks[0]
    x = torch.cat([h, path[:, 0], path[:, 1]], dim=-1)
    y = x @ inp.proj.weight.T + inp.proj.bias + F.silu(x @ inp.linear.weight.T + inp.linear.bias)
    y = y + F.silu(y @ blk.linear.weight.T + blk.linear.bias)
    torch.testing.assert_close(heads.head_logits(2, h, path, lm_head), y @ lm_head.T)


def test_training_forward_returns_every_head(base_weights) -> None:
    heads = randomize(HydraHeads(HIDDEN, VOCAB, num_heads=4))
    h = torch.randn(2, 7, HIDDEN)
    path = torch.randn(2, 7, 4, HIDDEN)
    outs = heads(h, path)
    assert len(outs) == 4
    for d, out in enumerate(outs, 1):
        torch.testing.assert_close(out, heads.head_hidden(d, h, path))
        assert out.shape == (2, 7, HIDDEN)


def test_shared_layers_apply_one_block_repeatedly() -> None:
    heads = randomize(HydraHeads(HIDDEN, VOCAB, num_heads=2, num_layers=4, share_layers=True))
    assert len(heads.stacks[0].blocks) == 1 and heads.stacks[0].count == 3
    keys = [k for k in heads.state_dict() if k.startswith("stacks.0.")]
    assert keys == ["stacks.0.blocks.0.linear.weight", "stacks.0.blocks.0.linear.bias"]
    x = torch.randn(2, HIDDEN)
    block = heads.stacks[0].blocks[0]
    torch.testing.assert_close(heads.stacks[0](x), block(block(block(x))))


def test_own_lm_head_with_bias(base_weights) -> None:
    embed, lm_head = base_weights
    heads = HydraHeads(HIDDEN, VOCAB, num_heads=2, own_lm_head=True, lm_head_bias=True)
    heads.init_lm_heads_from(lm_head)
    h = torch.randn(3, HIDDEN)
    path = torch.randn(3, 2, HIDDEN)
    torch.testing.assert_close(heads.head_logits(1, h, path), h @ lm_head.T)
    assert heads.config_dict()["own_lm_head"] and heads.config_dict()["lm_head_bias"]


def test_make_heads_rejects_unknown_kind() -> None:
    import pytest

    from entmtp_vllm.errors import EntMTPError

    with pytest.raises(EntMTPError, match="unknown head kind"):
        make_heads("eagle", HIDDEN, VOCAB)


PREFIX = PrefixLayerConfig(num_attention_heads=4, num_key_value_heads=2, head_dim=4, intermediate_size=24, rope_theta=100.0)


def naive_prefix(layer: PrefixLayer, x: torch.Tensor, positions: torch.Tensor, window: int | None = None) -> torch.Tensor:
    """Position-by-position reference: causal GQA attention with RoPE, SwiGLU MLP (over the
    last `window` positions only, when given)."""
    c = layer.config
    outs = []

    def rms(v, w):
        return w * (v / torch.sqrt(v.pow(2).mean(-1, keepdim=True) + c.rms_norm_eps))

    def rope(v, p):  # v [heads, D]
        d = c.head_dim
        inv = 1.0 / (c.rope_theta ** (torch.arange(0, d, 2).float() / d))
        ang = p * inv
        cos, sin = torch.cat([ang.cos(), ang.cos()]), torch.cat([ang.sin(), ang.sin()])
        rot = torch.cat([-v[..., d // 2 :], v[..., : d // 2]], dim=-1)
        return v * cos + rot * sin

    ks, vs = [], []
    for t in range(x.shape[0]):
        n = rms(x[t], layer.input_layernorm.weight)
        q = rope((layer.q_proj.weight @ n).view(c.num_attention_heads, c.head_dim), float(positions[t]))
        ks.append(rope((layer.k_proj.weight @ n).view(c.num_key_value_heads, c.head_dim), float(positions[t])))
        vs.append((layer.v_proj.weight @ n).view(c.num_key_value_heads, c.head_dim))
        heads_out = []
        group = c.num_attention_heads // c.num_key_value_heads
        for a in range(c.num_attention_heads):
            kv = a // group
            seen = slice(-window if window else 0, None)
            scores = torch.stack([q[a] @ k[kv] for k in ks[seen]]) / c.head_dim**0.5
            w = torch.softmax(scores, 0)
            heads_out.append(sum(wi * v[kv] for wi, v in zip(w, vs[seen])))
        h = x[t] + layer.o_proj.weight @ torch.cat(heads_out)
        m = rms(h, layer.post_attention_layernorm.weight)
        h = h + layer.down_proj.weight @ (F.silu(layer.gate_proj.weight @ m) * (layer.up_proj.weight @ m))
        outs.append(h)
    return torch.stack(outs)


def test_prefix_layer_is_identity_when_fresh() -> None:
    layer = PrefixLayer(HIDDEN, PREFIX)
    x = torch.randn(5, HIDDEN)
    torch.testing.assert_close(layer(x, torch.arange(5)), x)


def test_prefix_layer_matches_naive_and_incremental_cache() -> None:
    layer = randomize(PrefixLayer(HIDDEN, PREFIX), scale=0.2)
    x = torch.randn(7, HIDDEN)
    pos = torch.arange(3, 10)
    full = layer(x, pos)
    torch.testing.assert_close(full, naive_prefix(layer, x, pos), atol=1e-5, rtol=1e-4)
    cache = PrefixCache()
    parts = [layer(x[:3], pos[:3], cache=cache), layer(x[3:4], pos[3:4], cache=cache), layer(x[4:], pos[4:], cache=cache)]
    torch.testing.assert_close(torch.cat(parts), full, atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(cache.last_output, full[-1], atol=1e-5, rtol=1e-4)
    assert cache.length == 7 and cache.positions == list(range(3, 10))
    cache.truncate(2)
    assert cache.length == 2 and cache.positions == [3, 4]


def test_prefix_layer_sliding_window_matches_naive_with_a_trimmed_cache() -> None:
    """A window of 3: every position reads itself and the 2 before it, in one pass or one
    position at a time through a cache that forgets what no window reads any more."""
    windowed = randomize(PrefixLayer(HIDDEN, PREFIX.model_copy(update={"window": 3})), scale=0.2)
    x = torch.randn(12, HIDDEN)
    pos = torch.arange(12)
    full = windowed(x, pos)
    torch.testing.assert_close(full, naive_prefix(windowed, x, pos, window=3), atol=1e-5, rtol=1e-4)
    unwindowed = PrefixLayer(HIDDEN, PREFIX)
    unwindowed.load_state_dict(windowed.state_dict())
    assert not torch.allclose(unwindowed(x, pos)[5:], full[5:], atol=1e-4)  # the window bites
    cache, lengths, steps = PrefixCache(), [], []
    for t in range(12):
        steps.append(windowed(x[t : t + 1], pos[t : t + 1], cache=cache))
        lengths.append(cache.length)
    torch.testing.assert_close(torch.cat(steps), full, atol=1e-5, rtol=1e-4)
    assert max(lengths) <= 6 and cache.positions == list(range(12 - cache.length, 12))


def test_prefix_layer_batched_with_padding() -> None:
    layer = randomize(PrefixLayer(HIDDEN, PREFIX), scale=0.2)
    x = torch.randn(2, 5, HIDDEN)
    pad = torch.tensor([[False] * 5, [False, False, False, True, True]])
    out = layer(x, torch.arange(5).expand(2, -1), key_padding=pad)
    torch.testing.assert_close(out[1, :3], layer(x[1, :3], torch.arange(3)), atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(out[0], layer(x[0], torch.arange(5)), atol=1e-5, rtol=1e-4)


def test_prefix_config_from_base_config() -> None:
    cfg = PrefixLayerConfig.from_base_config(
        {"num_attention_heads": 9, "num_key_value_heads": 3, "hidden_size": 576, "intermediate_size": 1536,
         "rope_theta": 100000.0, "rms_norm_eps": 1e-5}
    )
    assert cfg.head_dim == 64 and cfg.num_key_value_heads == 3 and cfg.rope_theta == 100000.0


def test_core_heads_do_not_import_transformers() -> None:
    code = (
        "import sys; import entmtp_vllm.heads.drafting, entmtp_vllm.heads.checkpoint; "
        "bad = [m for m in ('transformers', 'vllm') if m in sys.modules]; assert not bad, bad"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
