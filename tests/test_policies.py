"""Tests for entmtp_vllm/policies.py: configs, parsing, static / ladder / hysteresis choices."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from entmtp_vllm.errors import EntMTPError
from entmtp_vllm.features import StepFeatures
from entmtp_vllm.policies import (
    HysteresisPolicyConfig,
    LadderPolicyConfig,
    StaticPolicyConfig,
    make_policy,
    parse_policy_arg,
    validate_policy_config,
)
from entmtp_vllm.topology import TopologyBank
from entmtp_vllm.tree import Tree

BANK = TopologyBank(
    [Tree.from_spec(spec) for spec in ("chain:1", "chain:2", "full:2,2", "full:3,2,2")],
    ["tiny", "small", "medium", "big"],
)


def at(s: float) -> StepFeatures:
    """Features whose path value is s (nothing else matters to these policies)."""
    return StepFeatures(s, s, [], 1.0, {}, 0.0, 0.0, 0.0, 0)


# ---------------------------------------------------------------------------
# Static and ladder
# ---------------------------------------------------------------------------


def test_static_always_chooses_its_tree() -> None:
    policy = make_policy({"kind": "static", "tree": "medium"}, BANK)
    state = policy.new_state()
    assert state.tree == 2
    assert [policy.choose(state, at(s)) for s in (0.0, 0.5, 1.0)] == [2, 2, 2]
    assert (state.steps, state.switches, state.usage) == (3, 0, [0, 0, 3, 0])


def test_ladder_bins_with_edges_going_to_the_lower_bin() -> None:
    policy = make_policy(LadderPolicyConfig(edges=[0.1, 0.3], trees=["tiny", "small", "big"]), BANK)
    state = policy.new_state()
    assert state.tree == 0
    chosen = [policy.choose(state, at(s)) for s in (0.05, 0.1, 0.1000001, 0.3, 0.31, 1.0, 0.0)]
    assert chosen == [0, 0, 1, 1, 3, 3, 0]
    assert state.switches == 3
    assert state.usage == [3, 2, 0, 2]


def test_ladder_accepts_indices_and_names_mixed() -> None:
    policy = make_policy({"kind": "ladder", "edges": [0.5], "trees": [1, "big"]}, BANK)
    state = policy.new_state()
    assert [policy.choose(state, at(s)) for s in (0.5, 0.6)] == [1, 3]


# ---------------------------------------------------------------------------
# Hysteresis
# ---------------------------------------------------------------------------


def test_hysteresis_switches_and_counts() -> None:
    policy = make_policy(HysteresisPolicyConfig(conservative="small", aggressive="big", tau_on=0.3, tau_off=0.1), BANK)
    state = policy.new_state()
    assert state.tree == 1
    sequence = [0.2, 0.3, 0.31, 0.2, 0.1, 0.2, 0.5, 0.05]
    chosen = [policy.choose(state, at(s)) for s in sequence]
    assert chosen == [1, 1, 3, 3, 1, 1, 3, 1]
    assert state.switches == 4
    assert state.usage == [0, 5, 0, 3]


def test_single_threshold_is_the_default() -> None:
    config = validate_policy_config({"kind": "hysteresis", "conservative": 0, "aggressive": 3, "tau_on": 0.2})
    assert config.tau_off == 0.2
    policy = make_policy(config, BANK)
    state = policy.new_state()
    assert [policy.choose(state, at(s)) for s in (0.2, 0.21, 0.2, 0.21)] == [0, 3, 0, 3]


@given(
    taus=st.tuples(st.floats(0.0, 1.0), st.floats(0.0, 1.0)).map(sorted),
    scores=st.lists(st.floats(0.0, 1.0), max_size=60),
)
def test_hysteresis_never_flips_inside_the_band(taus: list[float], scores: list[float]) -> None:
    tau_off, tau_on = taus
    policy = make_policy(HysteresisPolicyConfig(conservative=0, aggressive=3, tau_on=tau_on, tau_off=tau_off), BANK)
    state = policy.new_state()
    previous, changes = state.tree, 0
    for s in scores:
        chosen = policy.choose(state, at(s))
        if tau_off < s <= tau_on:
            assert chosen == previous
        elif s > tau_on:
            assert chosen == 3
        else:
            assert chosen == 0
        changes += chosen != previous
        previous = chosen
    assert state.switches == changes
    assert state.steps == len(scores) == sum(state.usage)


# ---------------------------------------------------------------------------
# Config and bank errors
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("config", "field"),
    [
        ({"kind": "ladder", "edges": [0.3, 0.1], "trees": ["tiny", "small", "big"]}, "ladder.edges"),
        ({"kind": "ladder", "edges": [0.1, 0.1], "trees": ["tiny", "small", "big"]}, "ladder.edges"),
        ({"kind": "ladder", "edges": [0.1], "trees": ["tiny"]}, "ladder.trees"),
        ({"kind": "hysteresis", "conservative": 0, "aggressive": 1, "tau_on": 0.1, "tau_off": 0.2}, "hysteresis.tau_off"),
        ({"kind": "hysteresis", "conservative": 0, "aggressive": 1, "tau_on": float("nan")}, "hysteresis.tau_on"),
        ({"kind": "static", "tree": True}, "static.tree"),
        ({"kind": "static", "tree": "tiny", "extra": 1}, "static.extra"),
        ({"kind": "static"}, "static.tree"),
        ({"kind": "adaptive"}, "adaptive"),
        ({"kind": "static", "tree": "huge"}, "static.tree"),
        ({"kind": "static", "tree": 4}, "static.tree"),
        ({"kind": "static", "tree": -1}, "static.tree"),
        ({"kind": "ladder", "edges": [0.5], "trees": ["tiny", "nope"]}, "ladder.trees.1"),
        ({"kind": "hysteresis", "conservative": "tiny", "aggressive": "nope", "tau_on": 0.1}, "hysteresis.aggressive"),
    ],
)
def test_bad_configs_name_the_field(config: dict, field: str) -> None:
    with pytest.raises(EntMTPError, match=field) as error:
        make_policy(config, BANK)
    assert "\n" not in str(error.value)


def test_unknown_tree_message_lists_the_bank() -> None:
    with pytest.raises(EntMTPError, match="tiny, small, medium, big"):
        make_policy(StaticPolicyConfig(tree="huge"), BANK)


# ---------------------------------------------------------------------------
# CLI strings
# ---------------------------------------------------------------------------


def test_parse_policy_arg_forms() -> None:
    assert parse_policy_arg("static:big") == StaticPolicyConfig(tree="big")
    assert parse_policy_arg("static:2") == StaticPolicyConfig(tree=2)
    assert parse_policy_arg("ladder:0.1,0.3:t1,t2,t3") == LadderPolicyConfig(edges=[0.1, 0.3], trees=["t1", "t2", "t3"])
    assert parse_policy_arg("hysteresis:0.02,0.01:small,big") == HysteresisPolicyConfig(
        conservative="small", aggressive="big", tau_on=0.02, tau_off=0.01
    )
    assert parse_policy_arg("hysteresis:0.02:small,big").tau_off == 0.02


@pytest.mark.parametrize(
    "text",
    [
        "",
        "static",
        "static:",
        "static:a:b",
        "ladder:0.1",
        "ladder:0.1:a,b:c",
        "ladder:x,0.3:a,b,c",
        "hysteresis:0.1,0.05,0.01:a,b",
        "hysteresis:0.1:a",
        "hysteresis:0.1:a,b,c",
        "random:0.1",
        "static@p0:a",
        "hysteresis@:0.1:a,b",
    ],
)
def test_parse_policy_arg_rejects_bad_forms(text: str) -> None:
    with pytest.raises(EntMTPError, match="accepted forms"):
        parse_policy_arg(text)


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ("ladder:0.3,0.1:a,b,c", "ladder.edges"),
        ("ladder:0.1,0.3:a,b", "ladder.trees"),
        ("hysteresis:0.01,0.02:a,b", "hysteresis.tau_off"),
        ("hysteresis@psychic:1:a,b", "hysteresis.feature"),
    ],
)
def test_parse_policy_arg_reports_invalid_values(text: str, field: str) -> None:
    with pytest.raises(EntMTPError, match=field):
        parse_policy_arg(text)


def test_policies_can_threshold_another_feature() -> None:
    """hysteresis@lookup_match: the lookup match length, not the path value, drives the switch;
    a lookup feature absent from a step reads 0."""
    policy = make_policy(parse_policy_arg("hysteresis@lookup_match:2.5,1.5:small,big"), BANK)
    state = policy.new_state()

    def step(match: float | None) -> StepFeatures:
        features = at(0.99)  # a high path value that must not matter
        if match is not None:
            features.extra["lookup_match"] = match
        return features

    chosen = [policy.choose(state, step(m)) for m in (1, 3, 2, None, 4, 1)]
    assert [BANK.names[i] for i in chosen] == ["small", "big", "big", "small", "big", "small"]
    ladder = make_policy(parse_policy_arg("ladder@recent_accept_mean:1.5:tiny,big"), BANK)
    features = at(0.0)
    features.recent_accept_mean = 2.0
    assert ladder.choose(ladder.new_state(), features) == BANK.index("big")


def test_reads_verifier_says_whether_p0_or_entropy_can_change_a_choice() -> None:
    """Engines skip the root softmax when `reads_verifier` is False: then no value of p0 /
    entropy / path value may change the choice."""
    policies = {
        "static:medium": False,
        "hysteresis:0.5:small,big": True,
        "ladder@entropy:1.0:tiny,big": True,
        "hysteresis@lookup_match:1.5:small,big": False,
        "ladder@recent_accept_mean:1.5:tiny,big": False,
    }
    for text, reads in policies.items():
        policy = make_policy(parse_policy_arg(text), BANK)
        assert policy.reads_verifier is reads, text
        if reads:
            continue
        for extreme in (0.0, 1.0):
            state_a, state_b = policy.new_state(), policy.new_state()
            for match in (0.0, 3.0, 1.0, 4.0):
                high, low = at(1.0 - extreme), at(extreme)
                high.entropy, low.entropy = 10.0 * extreme, 10.0 * (1.0 - extreme)
                high.extra["lookup_match"] = low.extra["lookup_match"] = match
                assert policy.choose(state_a, high) == policy.choose(state_b, low), text


def test_head_feature_reads_head_one_and_says_so() -> None:
    """hysteresis@head_top1_1: head 1's top-1 probability drives the switch (the path value does
    not); `heads_read` tells an engine how deep a chain to compute, and a step without it is an
    error, not a silent 0."""
    policy = make_policy(parse_policy_arg("hysteresis@head_top1_1:0.6,0.3:small,big"), BANK)
    assert policy.heads_read == 1 and not policy.reads_verifier
    state = policy.new_state()
    chosen = []
    for p1 in (0.5, 0.7, 0.4, 0.2, 0.9):
        features = at(0.99)
        features.head_top1 = [p1, 0.01]
        chosen.append(BANK.names[policy.choose(state, features)])
    assert chosen == ["small", "big", "big", "small", "big"]
    with pytest.raises(ValueError, match="head 1"):
        policy.choose(state, at(0.5))
    for text in ("static:big", "hysteresis:0.5:small,big", "ladder@lookup_match:1:tiny,big"):
        assert make_policy(parse_policy_arg(text), BANK).heads_read == 0, text
    assert make_policy(parse_policy_arg("ladder@head_top1_1:0.3,0.6:tiny,small,big"), BANK).heads_read == 1
