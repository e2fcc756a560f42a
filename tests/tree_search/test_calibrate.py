"""Scheduler calibration: the replay equals the engine's own run, the sweep picks the best policy on a
constructed case, and the chosen policy is written into a bank file that loads back and validates."""

from __future__ import annotations

import json

import pytest

from _search_parts import calibrate, random_prompts
from entmtp_vllm.bank_file import BankFile, load_bank, save_bank
from entmtp_vllm.engine.reference import ReferenceEngine
from entmtp_vllm.errors import EntMTPError
from entmtp_vllm.policies import make_policy
from entmtp_vllm.topology import TopologyBank
from entmtp_vllm.tree import Tree
from tree_search.calibrate import (
    CostModel,
    PositionFeatures,
    best_of,
    build_features,
    policy_grid,
    policy_string,
    quantile,
    replay,
    sweep,
    write_policy,
)
from tree_search.trajectories import Calibration, Trajectory

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
    s = sorted(step["features"]["path_value"] for step in probe.per_step)
    tau = s[len(s) // 2]
    on_s = {"kind": "hysteresis", "conservative": "small", "aggressive": "big", "tau_on": tau,
            "tau_off": s[len(s) // 4]}
    on_history = {"kind": "hysteresis", "conservative": "small", "aggressive": "big", "tau_on": 1.5,
                  "tau_off": 1.5, "feature": "recent_accept_mean"}  # depends on the replay's own accept lengths
    p1 = sorted(step["features"]["head_top1_1"] for step in probe.per_step)
    on_head = {"kind": "hysteresis", "conservative": "small", "aggressive": "big", "tau_on": p1[len(p1) // 2],
               "tau_off": p1[len(p1) // 2], "feature": "head_top1_1"}  # the drafter's own confidence
    for config in (on_s, on_history, on_head):
        replayed = replay(config, TREES, calibration, features, detail=True)
        assert replayed.switches > 0 and set(replayed.tree_steps.values()) != {0}

        bank = TopologyBank([t for _, t in TREES], [n for n, _ in TREES])
        steps = assert_replay_is_the_engines_run(model, drafter, bank, config, calibration, replayed)
        assert replayed.tau == pytest.approx(sum(r.accept_length for r in steps) / len(steps))


def constructed_case():
    """Two regimes per prompt: confident stretches where the heads' chain is right (s = 0.9^4) and
    uncertain ones where no draft is accepted (s = 0.2). The big tree costs twice the small one."""
    trajectories, features = [], []
    for k in range(4):
        ranks, p0, chain = [], [], []
        for i in range(60):
            confident = (i // 6 + k) % 2 == 0
            ranks.append([0, 0, 0] if confident else [7, 7, 7])
            p0.append(0.9 if confident else 0.2)
            chain.append([0.9, 0.9, 0.9] if confident else [0.5, 0.5, 0.5])
        trajectories.append(Trajectory(f"p{k}", "synthetic", [1, 2, 3], list(range(10, 70)), ranks))
        features.append(PositionFeatures(f"p{k}", p0, [1.0] * 60, chain))
    calibration = Calibration(trajectories, max_tokens=48, eos_ids=frozenset(), rank_depth=3, rank_cap=16)
    trees = [("small", Tree.from_spec("chain:1")), ("big", Tree.from_spec("chain:3"))]
    costs = CostModel({"small": 0.010, "big": 0.020}, prefill_s_per_token=0.001)
    return calibration, features, trees, costs


def test_the_sweep_picks_the_best_policy_and_writes_it_into_the_bank(tmp_path):
    calibration, features, trees, costs = constructed_case()
    s_values = [step["features"]["path_value"] for step in
                replay({"kind": "static", "tree": "big"}, trees, calibration, features, detail=True).per_step]
    grid = policy_grid(trees, s_values)
    assert {g["family"] for g in grid} == {"static", "hysteresis"}  # a ladder needs three trees
    paper = [g for g in grid if g["source"] == "paper τ grid"]
    assert {g["config"]["tau_on"] for g in paper} == {0.001, 0.005, 0.01, 0.02, 0.05}
    assert any(g["config"]["tau_off"] < g["config"]["tau_on"] for g in paper)
    rows = sweep(grid, trees, calibration, features, costs)
    assert rows == sorted(rows, key=lambda r: -r["predicted_tokens_per_second"])

    # by hand: static small emits 2 per confident step, static big 4 at twice the cost; the right
    # switch uses big exactly on confident steps and small elsewhere
    static = {r["config"]["tree"]: r for r in rows if r["family"] == "static"}
    assert static["small"]["tau"] < static["big"]["tau"]
    best = rows[0]
    assert best["family"] == "hysteresis"
    assert 0.2 <= best["config"]["tau_off"] <= best["config"]["tau_on"] < 0.9 ** 4
    assert best["predicted_tokens_per_second"] > max(r["predicted_tokens_per_second"] for r in static.values())
    perfect = replay(best["config"], trees, calibration, features, detail=True)
    for step in perfect.per_step:
        assert step["tree"] == ("big" if step["features"]["p0"] == 0.9 else "small")
    # the paper's grid sits below s everywhere here: always aggressive, i.e. static big
    for r in rows:
        if r["source"] == "paper τ grid":
            assert r["tree_steps"]["small"] == 0 and r["tau"] == static["big"]["tau"]
    assert best_of(rows, "static")["config"]["tree"] in ("small", "big")

    bank_path = tmp_path / "bank.json"
    save_bank(BankFile.model_validate({"trees": [{"name": n, "choices": t.choices} for n, t in trees],
                                       "policy": {"kind": "static", "tree": "big"}}), bank_path)
    written = write_policy(bank_path, best["config"], [], {"calibration": {"chosen": best["policy"]}})
    loaded = load_bank(bank_path)
    assert loaded.policy == written.policy == best["config"]
    assert loaded.metadata["calibration"]["chosen"] == policy_string(best["config"])
    assert [t.name for t in loaded.trees] == ["small", "big"]
    make_policy(loaded.policy, loaded.topology_bank())  # resolves against the bank
    assert json.loads(bank_path.read_text())["policy"]["kind"] == "hysteresis"


def test_a_policy_naming_a_tree_outside_the_bank_brings_the_tree_along(tmp_path):
    bank_path = tmp_path / "bank.json"
    save_bank(BankFile.model_validate({"trees": [{"name": "small", "choices": [[0]]}]}), bank_path)
    extra = [{"name": "big", "choices": [[0], [0, 0]], "measured": {"accept_length": 1.5, "nodes": 3}}]
    config = {"kind": "hysteresis", "conservative": "small", "aggressive": "big", "tau_on": 0.3, "tau_off": 0.1}
    write_policy(bank_path, config, extra, {})
    loaded = load_bank(bank_path)
    assert [t.name for t in loaded.trees] == ["small", "big"] and loaded.policy["tau_off"] == 0.1


def test_ladders_and_policy_strings():
    trees = [("a", Tree.from_spec("chain:1")), ("b", Tree.from_spec("chain:2")), ("c", Tree.from_spec("full:2,1"))]
    s = [i / 100 for i in range(101)]
    grid = policy_grid(trees, s)
    ladders = [g for g in grid if g["family"] == "ladder"]
    assert ladders and all(g["config"]["trees"] == ["a", "b", "c"] for g in ladders)
    uniform = next(g for g in ladders if "uniform" in g["source"])
    assert uniform["config"]["edges"] == pytest.approx([quantile(s, 1 / 3), quantile(s, 2 / 3)], abs=1e-3)
    from entmtp_vllm.policies import parse_policy_arg

    grid += policy_grid(trees, s, {"recent_accept_mean": [1.0, 1.5, 2.0, 2.5]})[len(grid):]
    assert {g["config"]["feature"] for g in grid if g["family"] == "hysteresis@recent_accept_mean"} == {
        "recent_accept_mean"}
    on_head = [g for g in policy_grid(trees, s, {"head_top1_1": [0.1, 0.4, 0.5, 0.9]})
               if g["config"].get("feature") == "head_top1_1"]
    assert {g["family"] for g in on_head} == {"hysteresis@head_top1_1", "ladder"}  # head 1: thresholds and ladders
    grid += on_head
    for g in grid:  # the CLI form parses back to the same config
        assert parse_policy_arg(g["policy"]).model_dump(mode="json") == g["config"]


def test_a_recalibration_drops_the_trees_an_earlier_one_added(tmp_path):
    from tree_search.calibrate import final_trees

    bank_path = tmp_path / "bank.json"
    save_bank(BankFile.model_validate({"trees": [{"name": "small", "choices": [[0]]}]}), bank_path)
    extra = [{"name": "big", "choices": [[0], [0, 0]], "measured": {"accept_length": 1.5, "nodes": 3}}]
    config = {"kind": "hysteresis", "conservative": "small", "aggressive": "big", "tau_on": 0.3, "tau_off": 0.3}
    write_policy(bank_path, config, extra, {})
    assert load_bank(bank_path).metadata["calibration_added_trees"] == ["big"]
    write_policy(bank_path, {"kind": "static", "tree": "small"}, [], {}, base=["small"])
    loaded = load_bank(bank_path)
    assert [t.name for t in loaded.trees] == ["small"] and loaded.metadata["calibration_added_trees"] == []

    pool = [("small", Tree.from_spec("chain:1")), ("mid", Tree.from_spec("chain:2")), ("deep", Tree.from_spec("chain:4"))]
    assert [n for n, _ in final_trees(config | {"aggressive": "mid"}, pool, ["small"])] == ["small", "mid"]
    assert [n for n, _ in final_trees({"kind": "static", "tree": "small"}, pool, ["small"])] == ["small"]
    assert [n for n, _ in final_trees({"kind": "ladder", "edges": [0.1, 0.2], "trees": ["small", "mid", "deep"]},
                                      pool, ["mid"])] == ["mid", "small", "deep"]


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
