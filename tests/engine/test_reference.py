"""The reference engine on a tiny random Llama: tree decoding vs AR, KV compaction, stops, errors."""

from __future__ import annotations

import pytest
import torch
from transformers.cache_utils import DynamicCache

from entmtp_vllm.config import SamplingParams
from entmtp_vllm.engine.kv_cache import compact_to_path
from entmtp_vllm.engine.reference import ReferenceEngine
from entmtp_vllm.errors import EntMTPError
from entmtp_vllm.policies import make_policy
from entmtp_vllm.topology import TopologyBank, build_tree_buffers
from entmtp_vllm.tree import Tree

PROMPTS = [[5, 17, 42, 99, 3], [200, 1, 7], list(range(10, 40, 3))]
TREES = {
    "chain:3": Tree.from_spec("chain:3"),
    "full:2,2,1": Tree.from_spec("full:2,2,1"),
    "full:3,2": Tree.from_spec("full:3,2"),
    "full:2^3": Tree.from_spec("full:2^3"),
    "sparse": Tree.from_choices([[0], [1], [2], [0, 0], [0, 1], [1, 0], [2, 0], [0, 0, 0], [1, 0, 0], [2, 0, 0], [1, 0, 0, 0]]),
}


def bank_of(*names: str) -> TopologyBank:
    return TopologyBank([TREES[n] for n in names], list(names))


def test_last_hidden_state_is_after_the_final_norm(tiny_model):
    ids = torch.tensor([PROMPTS[0]])
    with torch.no_grad():
        out = tiny_model(ids, output_hidden_states=True)
        base = tiny_model.model(ids).last_hidden_state
    assert torch.equal(out.hidden_states[-1], base)
    torch.testing.assert_close(tiny_model.lm_head(out.hidden_states[-1]), out.logits)


def test_tree_verify_equals_recomputing_every_path(tiny_model):
    """The custom 4-D mask reaches attention unmodified: each node's logits equal a
    from-scratch forward over prefix + its root-to-node path."""
    engine = ReferenceEngine(tiny_model, None)
    buffers = build_tree_buffers(TREES["sparse"])
    prefix = PROMPTS[2]
    tokens = torch.randint(0, 256, (buffers.num_nodes,), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        cache = DynamicCache(config=tiny_model.config)
        engine._forward(torch.tensor(prefix), cache)
        logits, hidden = engine._forward(
            tokens, cache, position_ids=len(prefix) + buffers.depths, attention_mask=engine._tree_mask(buffers, len(prefix))
        )
        for i, path in enumerate(buffers.nodes):
            chain = [0] + [buffers.nodes.index(path[:k]) for k in range(1, len(path) + 1)]
            seq = prefix + [int(tokens[j]) for j in chain]
            ref = tiny_model(torch.tensor([seq]), output_hidden_states=True)
            torch.testing.assert_close(logits[i], ref.logits[0, -1], atol=1e-5, rtol=1e-5)
            torch.testing.assert_close(hidden[i], ref.hidden_states[-1][0, -1], atol=1e-5, rtol=1e-5)


def test_compact_to_path_keeps_exactly_the_accepted_entries(tiny_model):
    engine = ReferenceEngine(tiny_model, None)
    buffers = build_tree_buffers(TREES["full:2^3"])
    prefix = PROMPTS[0]
    tokens = torch.randint(0, 256, (buffers.num_nodes,), generator=torch.Generator().manual_seed(2))
    accepted = [0, 2, 6, 14]  # root -> [1] -> [1, 1] -> [1, 1, 1]
    assert [buffers.nodes[a] for a in accepted] == [(), (1,), (1, 1), (1, 1, 1)]
    with torch.no_grad():
        cache = DynamicCache(config=tiny_model.config)
        engine._forward(torch.tensor(prefix), cache)
        engine._forward(tokens, cache, position_ids=len(prefix) + buffers.depths,
                        attention_mask=engine._tree_mask(buffers, len(prefix)))
        compact_to_path(cache, len(prefix), accepted)
        assert cache.get_seq_length() == len(prefix) + len(accepted)
        path = [int(tokens[a]) for a in accepted]
        ref_cache = DynamicCache(config=tiny_model.config)
        tiny_model(torch.tensor([prefix + path]), past_key_values=ref_cache, use_cache=True)
        for layer, ref_layer in zip(cache.layers, ref_cache.layers):
            torch.testing.assert_close(layer.keys, ref_layer.keys, atol=1e-5, rtol=1e-5)
            torch.testing.assert_close(layer.values, ref_layer.values, atol=1e-5, rtol=1e-5)
        # The next step over the compacted cache sees exactly prefix + path.
        nxt, _ = engine._forward(torch.tensor([7]), cache)
        full = tiny_model(torch.tensor([prefix + path + [7]])).logits[0, -1]
        torch.testing.assert_close(nxt[-1], full, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("prompt", PROMPTS)
def test_ar_equals_greedy_recomputation(tiny_model, greedy_ref, prompt):
    gen = ReferenceEngine(tiny_model, None).generate(prompt, 24, method="ar")
    assert gen.token_ids == greedy_ref(tiny_model, prompt, 24)[len(prompt):]
    assert gen.accept_lengths == [1] * 23 and gen.stop_reason == "length"


@pytest.mark.parametrize("tree", list(TREES))
def test_greedy_tree_decoding_equals_ar(tiny_model, make_oracle, tree):
    for prompt in PROMPTS:
        drafter, continuation = make_oracle(tiny_model, prompt, 30)
        engine = ReferenceEngine(tiny_model, None, drafter, bank_of(tree))
        ar = engine.generate(prompt, 30, method="ar")
        gen = engine.generate(prompt, 30)
        assert ar.token_ids == continuation
        assert gen.token_ids == ar.token_ids, f"tree {tree}, prompt {prompt}"
        assert gen.method == "tree" and len(gen.token_ids) == 30
        # The oracle hides the right token at varying ranks: long paths, through gaps.
        assert gen.mean_accept_length > 1.5
    if TREES[tree].num_nodes > TREES[tree].depth + 1:
        assert any(r.accepted != list(range(len(r.accepted))) for r in gen.steps)


def test_switching_policy_keeps_greedy_equality(tiny_model, make_oracle):
    bank = bank_of("chain:3", "full:2,2,1", "sparse")
    policy = make_policy({"kind": "ladder", "edges": [0.1, 0.3], "trees": ["chain:3", "full:2,2,1", "sparse"]}, bank)
    for prompt in PROMPTS:
        drafter, continuation = make_oracle(tiny_model, prompt, 40)
        gen = ReferenceEngine(tiny_model, None, drafter, bank, policy).generate(prompt, 40)
        assert gen.token_ids == continuation
        assert len(gen.trees_used) >= 2 and gen.tree_switches > 0
        assert all(r.features is not None and "path_value" in r.features for r in gen.steps)
        assert {r.tree_name for r in gen.steps} == set(gen.trees_used)


def test_every_verify_pass_sees_exactly_the_accepted_sequence(tiny_model, make_oracle):
    """After each compaction, the next verify's root logits equal a from-scratch forward
    over prompt + everything emitted so far."""
    calls = []

    class Recording(ReferenceEngine):
        def _forward(self, input_ids, cache, position_ids=None, attention_mask=None, last_only=False):
            logits, hidden = super()._forward(input_ids, cache, position_ids, attention_mask, last_only)
            calls.append((input_ids.tolist(), logits.clone()))
            return logits, hidden

    prompt = PROMPTS[0]
    drafter, _ = make_oracle(tiny_model, prompt, 30)
    gen = Recording(tiny_model, None, drafter, bank_of("full:2^3")).generate(prompt, 30)
    verifies = calls[1:]
    assert len(verifies) == len(gen.steps)
    emitted = 1  # the prefill's token
    for (tokens, logits), record in zip(verifies, gen.steps):
        seq = prompt + gen.token_ids[:emitted]
        assert tokens[0] == seq[-1]
        with torch.no_grad():
            full = tiny_model(torch.tensor([seq])).logits[0, -1]
        torch.testing.assert_close(logits[0], full, atol=1e-5, rtol=1e-5)
        emitted += record.accept_length


@pytest.mark.parametrize("acceptance", ["typical", "lossless", "greedy"])
@pytest.mark.parametrize("tree", ["full:2,2,1", "sparse"])
def test_sampling_runs_and_respects_max_tokens(tiny_model, make_oracle, acceptance, tree):
    prompt = PROMPTS[1]
    drafter, _ = make_oracle(tiny_model, prompt, 20)
    engine = ReferenceEngine(tiny_model, None, drafter, bank_of(tree))
    sampling = SamplingParams(temperature=0.8, top_k=50, top_p=0.95)
    for max_new in (1, 2, 17):
        gen = engine.generate(prompt, max_new, sampling=sampling, acceptance=acceptance, seed=3)
        assert len(gen.token_ids) == max_new and all(0 <= t < 256 for t in gen.token_ids)
        again = engine.generate(prompt, max_new, sampling=sampling, acceptance=acceptance, seed=3)
        assert again.token_ids == gen.token_ids
    ar = engine.generate(prompt, 17, sampling=sampling, method="ar", seed=3)
    assert len(ar.token_ids) == 17


def _with_eos(model, eos: int, *args) -> ReferenceEngine:
    saved = model.generation_config.eos_token_id
    model.generation_config.eos_token_id = eos
    try:
        return ReferenceEngine(model, None, *args)
    finally:
        model.generation_config.eos_token_id = saved


@pytest.mark.parametrize("eos_index", [0, 6])
def test_eos_is_emitted_then_generation_stops(tiny_model, make_oracle, eos_index):
    prompt = PROMPTS[2]
    drafter, continuation = make_oracle(tiny_model, prompt, 30)
    eos = continuation[eos_index]
    stop = continuation.index(eos)
    engine = _with_eos(tiny_model, eos, drafter, bank_of("full:2^3"))
    for method in ("tree", "ar"):
        gen = engine.generate(prompt, 30, method=method)
        assert gen.token_ids == continuation[: stop + 1], method
        assert gen.stop_reason == "eos"


def test_bf16_tree_decoding_runs(make_tiny, make_oracle):
    model = make_tiny(dtype=torch.bfloat16)
    prompt = PROMPTS[0]
    drafter, _ = make_oracle(model, prompt, 16)
    engine = ReferenceEngine(model, None, drafter, bank_of("full:2,2,1"))
    assert engine._tree_mask(build_tree_buffers(TREES["full:2,2,1"]), 4).dtype == torch.bfloat16
    gen = engine.generate(prompt, 16)
    ar = engine.generate(prompt, 16, method="ar")
    assert len(gen.token_ids) == len(ar.token_ids) == 16
    assert gen.mean_accept_length > 1.0  # bf16 drifts off the oracle's sequence, but some drafts land


class _ShallowDrafter:
    num_heads = 2


def test_tree_deeper_than_the_heads_is_rejected(tiny_model):
    with pytest.raises(EntMTPError, match="depth 3 but the heads draft only 2"):
        ReferenceEngine(tiny_model, None, _ShallowDrafter(), bank_of("chain:3"))


def test_prompt_too_long_for_the_context_is_rejected_before_decoding(make_tiny, make_oracle):
    model = make_tiny(max_positions=64)
    engine = ReferenceEngine(model, None)
    with pytest.raises(EntMTPError, match="context is 64 tokens"):
        engine.generate(list(range(60)), 5, method="ar")
    assert len(engine.generate(list(range(60)), 4, method="ar").token_ids) == 4


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"method": "tree"}, "needs heads and trees"),
        ({"method": "beam"}, "unknown method"),
        ({"acceptance": "strict"}, "unknown acceptance mode"),
        ({"max_new_tokens": 0}, "at least 1"),
        ({"prompt_ids": []}, "prompt is empty"),
    ],
)
def test_bad_requests_raise_entmtp_error(tiny_model, kwargs, message):
    args = {"prompt_ids": PROMPTS[0], "max_new_tokens": 4, **kwargs}
    with pytest.raises(EntMTPError, match=message):
        ReferenceEngine(tiny_model, None).generate(**args)


def test_heads_without_trees_are_rejected(tiny_model, make_oracle):
    drafter, _ = make_oracle(tiny_model, PROMPTS[0], 4)
    with pytest.raises(EntMTPError, match="both"):
        ReferenceEngine(tiny_model, None, drafter, None)


def _random_heads(kind: str, model, **kwargs):
    from entmtp_vllm.heads import make_heads
    from entmtp_vllm.heads.drafting import TreeDrafter

    torch.manual_seed(11)
    heads = make_heads(kind, model.config.hidden_size, model.config.vocab_size, **kwargs)
    with torch.no_grad():
        for param in heads.parameters():
            param.add_(torch.randn_like(param) * 0.05)
    return TreeDrafter(heads.eval(), model.get_input_embeddings().weight, model.get_output_embeddings().weight)


def _hydra_plus_plus(model):
    from entmtp_vllm.heads import PrefixLayerConfig

    return _random_heads("hydra", model, num_heads=4, prefix_layer=PrefixLayerConfig.from_base_config(model.config))


def _hydra_plus_plus_windowed(model):
    """Hydra++ as `train-heads --prefix-layer` makes it: a 4-position window over the answer."""
    from entmtp_vllm.heads import PrefixLayerConfig

    prefix = PrefixLayerConfig.from_base_config(model.config).model_copy(update={"window": 4, "context": "answer"})
    return _random_heads("hydra", model, num_heads=4, prefix_layer=prefix)


@pytest.mark.parametrize(
    "make_drafter",
    [
        lambda m: _random_heads("hydra", m, num_heads=4),
        lambda m: _random_heads("medusa", m, num_heads=4, num_layers=2),
        _hydra_plus_plus,
        _hydra_plus_plus_windowed,
    ],
    ids=["hydra", "medusa", "hydra++", "hydra++windowed"],
)
def test_random_heads_greedy_tree_equals_ar(tiny_model, make_drafter):
    drafter = make_drafter(tiny_model)
    bank = bank_of("chain:3", "full:2,2,1", "sparse")
    policy = make_policy({"kind": "hysteresis", "conservative": "chain:3", "aggressive": "sparse", "tau_on": 0.02, "tau_off": 0.01}, bank)
    for prompt in PROMPTS:
        engine = ReferenceEngine(tiny_model, None, drafter, bank, policy)
        ar = engine.generate(prompt, 20, method="ar")
        gen = engine.generate(prompt, 20)
        assert gen.token_ids == ar.token_ids
        assert all(len(r.features) > 0 and 0.0 <= r.features["path_value"] <= 1.0 for r in gen.steps)
        for tree in ("full:2,2,1", "sparse"):
            static = ReferenceEngine(tiny_model, None, drafter, bank_of(tree)).generate(prompt, 20)
            assert static.token_ids == ar.token_ids


def test_windowed_prefix_layer_follows_the_answer_through_acceptance(tiny_model):
    """After a tree generation, the windowed answer-context prefix layer's cache holds the
    positions from the prompt's last one on (at most two windows of them), and its last output
    is the layer run from scratch over the base hidden states of the accepted sequence."""
    drafter = _hydra_plus_plus_windowed(tiny_model)
    bank = TopologyBank([Tree.from_spec("lookup:3+full:2,1")], ["hybrid"])
    prompt = PROMPTS[0]
    engine = ReferenceEngine(tiny_model, None, drafter, bank)
    gen = engine.generate(prompt, 40)
    assert any(r.accept_length > 1 for r in gen.steps)  # paths of several nodes were observed
    cache = drafter.prefix_cache
    end = len(prompt) + len(gen.token_ids) - 1  # the hidden state of the last generated token's position
    assert cache.positions == list(range(end - cache.length, end)) and cache.length <= 8
    assert cache.positions[0] >= len(prompt) - 1
    with torch.no_grad():
        _, hidden = engine._forward(torch.tensor(prompt + gen.token_ids[:-1]), DynamicCache(config=tiny_model.config))
        first = len(prompt) - 1
        expected = drafter.heads.prefix(hidden[first:end], torch.arange(first, end))[-1]
    torch.testing.assert_close(cache.last_output, expected, atol=1e-4, rtol=1e-4)


def test_head_features_only_log_and_cost_head_calls(tiny_model, head_calls):
    """Without head_features the engine skips the heads' top-1 chain: the same tokens, trees
    and accept lengths (no policy reads the chain), no head_top1 in the records, and fewer
    head calls when a step's tree is shallower than the bank's deepest."""
    drafter = _random_heads("hydra", tiny_model, num_heads=4)
    bank = bank_of("chain:3", "sparse")  # depths 3 and 4
    probe = ReferenceEngine(tiny_model, None, drafter, bank).generate(PROMPTS[0], 20)
    tau = sorted(r.features["path_value"] for r in probe.steps)[len(probe.steps) // 2]  # switches often
    policy = make_policy({"kind": "hysteresis", "conservative": "chain:3", "aggressive": "sparse",
                          "tau_on": tau, "tau_off": tau}, bank)
    calls = head_calls(type(drafter.heads))
    runs = {}
    for logged in (True, False):
        calls.clear()
        engine = ReferenceEngine(tiny_model, None, drafter, bank, policy, head_features=logged)
        gens = [engine.generate(prompt, 20) for prompt in PROMPTS]
        runs[logged] = (gens, len(calls))
    (logged, logged_calls), (plain, plain_calls) = runs[True], runs[False]
    for a, b in zip(logged, plain):
        assert a.token_ids == b.token_ids
        assert [r.tree_name for r in a.steps] == [r.tree_name for r in b.steps]
        assert [r.accept_length for r in a.steps] == [r.accept_length for r in b.steps]
        assert [r.features["path_value"] for r in a.steps] == [r.features["path_value"] for r in b.steps]
        assert all("head_top1_4" in r.features for r in a.steps)
        assert not any(name.startswith("head_top1") for r in b.steps for name in r.features)
    assert {r.tree_name for g in plain for r in g.steps} == {"chain:3", "sparse"}  # both trees ran
    assert plain_calls < logged_calls  # chain:3 steps no longer run head 4


def test_head_feature_policy_chooses_on_head_one_at_no_extra_head_call(tiny_model, head_calls):
    """hysteresis@head_top1_1: the engine computes head 1's top-1 probability before choosing
    (and only head 1's), the choice follows it, greedy output stays AR's, and head 1 still runs
    once per step (the chain's call is the draft's)."""
    drafter = _random_heads("hydra", tiny_model, num_heads=4)
    bank = bank_of("chain:3", "sparse")
    probe = ReferenceEngine(tiny_model, None, drafter, bank, head_features=True).generate(PROMPTS[0], 20)
    tau = sorted(r.features["head_top1_1"] for r in probe.steps)[len(probe.steps) // 2]
    policy = make_policy({"kind": "hysteresis", "conservative": "chain:3", "aggressive": "sparse", "tau_on": tau,
                          "tau_off": tau, "feature": "head_top1_1"}, bank)
    calls = head_calls(type(drafter.heads))
    engine = ReferenceEngine(tiny_model, None, drafter, bank, policy)
    used = set()
    for prompt in PROMPTS:
        ar = engine.generate(prompt, 20, method="ar")
        calls.clear()
        gen = engine.generate(prompt, 20)
        assert gen.token_ids == ar.token_ids
        assert calls.count(1) == len(gen.steps)
        for r in gen.steps:
            assert "head_top1_1" in r.features and "head_top1_2" not in r.features
            assert r.tree_name == ("sparse" if r.features["head_top1_1"] > tau else "chain:3")
            used.add(r.tree_name)
    assert used == {"chain:3", "sparse"}


def test_lossless_treats_top_k_drafts_as_point_masses(tiny_model, monkeypatch):
    """The heads pick candidates by top-k, not by sampling from their softmax: lossless
    acceptance must get draft_probs=None (one-hot drafts), else its output is biased."""
    import entmtp_vllm.engine.reference as reference

    seen = []
    real_accept = reference.accept

    def spy(*args, **kwargs):
        seen.append(kwargs.get("draft_probs"))
        return real_accept(*args, **kwargs)

    monkeypatch.setattr(reference, "accept", spy)
    drafter = _random_heads("hydra", tiny_model, num_heads=3)
    engine = ReferenceEngine(tiny_model, None, drafter, bank_of("full:2,2,1"))
    gen = engine.generate(PROMPTS[0], 15, sampling=SamplingParams(temperature=1.0), acceptance="lossless", seed=0)
    assert len(gen.token_ids) == 15
    assert seen and all(probs is None for probs in seen)


def test_heads_shallower_than_the_tree_are_rejected(tiny_model):
    drafter = _random_heads("hydra", tiny_model, num_heads=2)
    with pytest.raises(EntMTPError, match="heads draft only 2"):
        ReferenceEngine(tiny_model, None, drafter, bank_of("full:2,2,1"))


def test_decode_pauses_after_prefill_and_every_step_and_times_only_itself(tiny_model, make_oracle):
    """`decode` is `generate` step by step: None after the prefill and after each step, the
    Generation last; two generations advanced in turns decode what each decodes alone, and
    time spent outside a generator (here a sleep per pause) is not counted in its times."""
    import time

    prompt = PROMPTS[0]
    drafter, continuation = make_oracle(tiny_model, prompt, 20)
    engine = ReferenceEngine(tiny_model, None, drafter, bank_of("full:2,2,1"))
    alone = engine.generate(prompt, 20)
    ar_engine = ReferenceEngine(tiny_model, None)
    runs = {"tree": engine.decode(prompt, 20), "ar": ar_engine.decode(prompt, 20, method="ar")}
    items: dict[str, list] = {"tree": [], "ar": []}
    while runs:
        for name in list(runs):
            item = next(runs[name])
            items[name].append(item)
            if item is not None:
                del runs[name]
            time.sleep(0.02)
    tree, ar = items["tree"][-1], items["ar"][-1]
    assert all(item is None for item in items["tree"][:-1] + items["ar"][:-1])
    assert len(items["tree"]) == len(tree.steps) + 2 and len(items["ar"]) == len(ar.steps) + 2
    assert tree.token_ids == alone.token_ids == continuation and ar.token_ids == continuation
    assert tree.accept_lengths == alone.accept_lengths
    for gen in (tree, ar):
        # its own time: the prefill and the steps, plus a little bookkeeping per step; the
        # (steps + 1) pauses held at least 0.02 s of sleep each, none of which is counted (the
        # margin, half the sleep, leaves room for a loaded machine's stalls in the bookkeeping)
        own = gen.prefill_time_s + sum(r.time_s for r in gen.steps)
        slept = 0.02 * (len(gen.steps) + 1)
        assert own <= gen.total_time_s < own + 0.5 * slept


def test_forked_drafters_decode_side_by_side_like_alone(tiny_model):
    """Hydra++ heads keep per-sequence state (the prefix layer's cache): engines decoding in
    turns need their own drafter (`fork`, same weights). Forked, each step's head features
    equal those of a generation alone; one shared drafter mixes the two sequences."""
    drafter = _hydra_plus_plus(tiny_model)
    bank = bank_of("full:2,2,1")

    def run(first, second):
        a = ReferenceEngine(tiny_model, None, first, bank, head_features=True).decode(PROMPTS[0], 16)
        b = ReferenceEngine(tiny_model, None, second, bank, head_features=True).decode(PROMPTS[2], 16)
        out = {}
        while len(out) < 2:
            for name, gen in (("a", a), ("b", b)):
                if name not in out and (item := next(gen)) is not None:
                    out[name] = item
        return out["a"], out["b"]

    alone = ReferenceEngine(tiny_model, None, drafter, bank, head_features=True).generate(PROMPTS[0], 16)
    forked, _ = run(drafter.fork(), drafter.fork())
    shared, _ = run(drafter, drafter)
    assert drafter.fork().heads is drafter.heads and drafter.fork().prefix_cache is not drafter.prefix_cache
    assert [r.features for r in forked.steps] == [r.features for r in alone.steps]
    assert forked.token_ids == alone.token_ids
    assert [r.features for r in shared.steps] != [r.features for r in alone.steps]
