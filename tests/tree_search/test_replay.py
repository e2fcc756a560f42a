"""Trajectory replay: a policy replayed over the calibration trajectories is the reference engine's
own greedy run (features, tree choices, accept lengths), with heads-only and hybrid banks; the
features cache is reused."""

from __future__ import annotations

import pytest

from _search_parts import calibrate, random_prompts
from entmtp_vllm.engine.reference import ReferenceEngine
from entmtp_vllm.policies import make_policy
from entmtp_vllm.topology import TopologyBank
from entmtp_vllm.tree import Tree
from tree_search.position_features import build_features
from tree_search.replay import replay


TREES = [("small", Tree.from_spec("chain:1")), ("big", Tree.from_spec("full:2,2,1"))]


def assert_replay_is_the_engines_run(model, drafter, bank, config, calibration, replayed) -> list:
    """The reference engine's greedy run with `config` over `bank`: same tokens as the
    calibration, and the replay's tree choices, accept lengths and features step by step.
    Returns the engine's step records."""
    engine = ReferenceEngine(model, None, drafter, bank, make_policy(config, bank), head_features=True)
    steps = []
    for trajectory in calibration.trajectories:
        gen = engine.generate(trajectory.prompt_ids, calibration.max_tokens, acceptance="greedy")
        assert gen.token_ids == trajectory.tokens[: calibration.max_tokens]
        steps += gen.steps
    assert [r.tree_name for r in steps] == [step["tree"] for step in replayed.per_step]
    assert [r.accept_length for r in steps] == [step["accept_length"] for step in replayed.per_step]
    for record, step in zip(steps, replayed.per_step):
        assert record.features.keys() == step["features"].keys()
        for key, value in record.features.items():
            assert step["features"][key] == pytest.approx(value, rel=1e-4, abs=1e-5), key
    return steps


def _between(values: list[float], quantile: float) -> float:
    """A threshold near `quantile` of `values` halfway between two observed values, never on one:
    the engine's float32 features match the replay's to rounding only (different matrix shapes:
    on an AVX512 Xeon a threshold placed on an observed median fell on the other side of the
    engine's value), and a tie at the threshold would then decide differently."""
    distinct = sorted(set(values))
    k = min(max(int(len(distinct) * quantile), 1), len(distinct) - 1)
    return (distinct[k - 1] + distinct[k]) / 2


def test_replay_equals_the_engine_step_by_step(tiny, tmp_path):
    """Features, tree choices and accept lengths of a hysteresis policy, replayed from the
    calibration, are the reference engine's own (greedy, float32)."""
    model, drafter = tiny
    calibration = calibrate(model, drafter, random_prompts(3))
    path = tmp_path / "features.jsonl"
    features = build_features(calibration, lambda: (model, None, drafter), path, {"test": 1}, progress=False)
    again = build_features(calibration, lambda: pytest.fail("the cache must be used"), path, {"test": 1}, progress=False)
    assert [f.as_record() for f in again] == [f.as_record() for f in features]

    probe = replay({"kind": "static", "tree": "big"}, TREES, calibration, features, detail=True)
    s = [step["features"]["path_value"] for step in probe.per_step]
    on_s = {"kind": "hysteresis", "conservative": "small", "aggressive": "big", "tau_on": _between(s, 0.5),
            "tau_off": _between(s, 0.25)}
    on_history = {"kind": "hysteresis", "conservative": "small", "aggressive": "big", "tau_on": 1.5,
                  "tau_off": 1.5, "feature": "recent_accept_mean"}  # depends on the replay's own accept lengths
    p1 = [step["features"]["head_top1_1"] for step in probe.per_step]
    on_head = {"kind": "hysteresis", "conservative": "small", "aggressive": "big", "tau_on": _between(p1, 0.5),
               "tau_off": _between(p1, 0.5), "feature": "head_top1_1"}  # the drafter's own confidence
    for config in (on_s, on_history, on_head):
        replayed = replay(config, TREES, calibration, features, detail=True)
        assert replayed.switches > 0 and set(replayed.tree_steps.values()) != {0}

        bank = TopologyBank([t for _, t in TREES], [n for n, _ in TREES])
        steps = assert_replay_is_the_engines_run(model, drafter, bank, config, calibration, replayed)
        assert replayed.tau == pytest.approx(sum(r.accept_length for r in steps) / len(steps))


HYBRID_TREES = [("hydra", Tree.from_spec("chain:1")), ("loop", Tree.from_spec("lookup:3+full:2,1")),
                ("copy", Tree.from_spec("lookup:2"))]


def test_hybrid_replay_equals_the_engine_step_by_step(tiny, tmp_path):
    """A bank with prompt-lookup trees: lookup features, tree choices (policies on the lookup
    match and on the recent lookup acceptance) and accept lengths replayed from the calibration
    are the reference engine's own (greedy, float32)."""
    model, drafter = tiny
    calibration = calibrate(model, drafter, random_prompts(3))
    features = build_features(calibration, lambda: (model, None, drafter), tmp_path / "f.jsonl", {"test": 1},
                              progress=False)
    on_match = {"kind": "hysteresis", "conservative": "hydra", "aggressive": "loop", "tau_on": 1.5, "tau_off": 1.5,
                "feature": "lookup_match"}
    on_rate = {"kind": "hysteresis", "conservative": "copy", "aggressive": "loop", "tau_on": 0.5, "tau_off": 0.3,
               "feature": "lookup_accept_rate"}
    bank = TopologyBank([t for _, t in HYBRID_TREES], [n for n, _ in HYBRID_TREES])
    for config in (on_match, on_rate, {"kind": "static", "tree": "loop"}):
        replayed = replay(config, HYBRID_TREES, calibration, features, detail=True)
        assert_replay_is_the_engines_run(model, drafter, bank, config, calibration, replayed)
        if config is on_match:
            assert replayed.switches > 0  # not a vacuous check: the lookup feature moves the policy
    static = replay({"kind": "static", "tree": "loop"}, HYBRID_TREES, calibration, features)
    assert static.tau > replay({"kind": "static", "tree": "hydra"}, HYBRID_TREES, calibration, features).tau
