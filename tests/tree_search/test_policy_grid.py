"""The policy grid and its sweep: the sweep picks the best policy on a constructed case (written into
a bank file that loads back and validates); ladders, feature thresholds and policy strings."""

from __future__ import annotations

import json

import pytest

from entmtp_vllm.bank_file import BankFile, load_bank, save_bank
from entmtp_vllm.policies import make_policy
from entmtp_vllm.tree import Tree
from tree_search.calibrate import write_policy
from tree_search.policy_grid import best_of, policy_grid, policy_string, quantile, sweep
from tree_search.position_features import PositionFeatures
from tree_search.replay import replay
from tree_search.step_costs import CostModel
from tree_search.trajectories import Calibration, Trajectory


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
