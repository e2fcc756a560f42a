"""Scheduler calibration: the chosen policy goes into the bank file with the trees it needs, and a
recalibration drops the trees an earlier one added."""

from __future__ import annotations

from entmtp_vllm.bank_file import BankFile, load_bank, save_bank
from entmtp_vllm.tree import Tree
from tree_search.calibrate import write_policy
from tree_search.policy_grid import final_trees


def test_a_policy_naming_a_tree_outside_the_bank_brings_the_tree_along(tmp_path):
    bank_path = tmp_path / "bank.json"
    save_bank(BankFile.model_validate({"trees": [{"name": "small", "choices": [[0]]}]}), bank_path)
    extra = [{"name": "big", "choices": [[0], [0, 0]], "measured": {"accept_length": 1.5, "nodes": 3}}]
    config = {"kind": "hysteresis", "conservative": "small", "aggressive": "big", "tau_on": 0.3, "tau_off": 0.1}
    write_policy(bank_path, config, extra, {})
    loaded = load_bank(bank_path)
    assert [t.name for t in loaded.trees] == ["small", "big"] and loaded.policy["tau_off"] == 0.1


def test_a_recalibration_drops_the_trees_an_earlier_one_added(tmp_path):
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
