"""`search cost-curve` and `search rerank`: a curve measured on a tiny random Llama, and banks
re-ranked from curves whose answer is known (no timing asserted)."""

from __future__ import annotations

import json

import pytest

from entmtp_vllm.bank_file import BankFile, load_bank, save_bank
from entmtp_vllm.cli.main import main as entmtp
from entmtp_vllm.errors import EntMTPError
from tree_search.cost_curve import CostCurve, load_curve, measure_cost_curve, model_shape, rerank

TINY = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
        "num_key_value_heads": 2, "vocab_size": 128}


@pytest.fixture()
def tiny_config(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(TINY))
    return path


def test_named_shapes_and_configs(tiny_config):
    label, shape = model_shape("smollm2-135m")
    assert shape["num_hidden_layers"] == 30 and shape["num_key_value_heads"] == 3
    assert model_shape(str(tiny_config))[1]["head_dim"] == 16  # hidden / heads when not given
    with pytest.raises(EntMTPError, match="named shape"):
        model_shape("no-such-shape")


def test_measure_on_a_tiny_random_llama(tiny_config):
    curve = measure_cost_curve(str(tiny_config), tokens=(1, 2, 4), batches=(1, 2), context=8, dtype="float32",
                               device="cpu", repeats=1, progress=False)
    assert sorted(curve.points) == [(1, 1), (1, 2), (1, 4), (2, 1), (2, 2), (2, 4)]
    assert all(ms > 0 for ms in curve.points.values())
    assert curve.relative(1, 1) == 1.0 and curve.relative(2, 1) == 1.0
    again = CostCurve.from_json(json.loads(json.dumps(curve.to_json())))
    assert again.points == curve.points and again.meta["context"] == 8
    with pytest.raises(EntMTPError, match="must include 1"):
        measure_cost_curve(str(tiny_config), tokens=(2, 4), device="cpu", progress=False)


def _curve(costs: dict[int, float]) -> CostCurve:
    return CostCurve("test", {(1, n): ms for n, ms in costs.items()}, {"device": "cpu", "context": 512})


def _bank(tmp_path) -> str:
    trees = [
        {"name": "n1", "choices": [[0]], "measured": {"accept_length": 1.4, "nodes": 2, "steps": 10}},
        {"name": "n4", "choices": [[0], [1], [2], [0, 0]], "measured": {"accept_length": 1.8, "nodes": 5, "steps": 10}},
        {"name": "n8", "choices": [[0], [1], [2], [3], [0, 0], [0, 1], [1, 0], [0, 0, 0]],
         "measured": {"accept_length": 2.0, "nodes": 9, "steps": 10}},
    ]
    path = tmp_path / "bank.json"
    save_bank(BankFile.model_validate({"trees": trees, "task": "t"}), path)
    return str(path)


def test_rerank_follows_the_curve(tmp_path):
    bank = load_bank(_bank(tmp_path))
    flat = rerank(bank, _curve({1: 10.0, 16: 10.0}), 1)  # a GPU-like curve: verifying is free
    assert [r["name"] for r in flat] == ["n8", "n4", "n1"] and all(r["pareto"] for r in flat)
    steep = rerank(bank, _curve({1: 10.0, 2: 12.0, 5: 18.0, 9: 30.0}), 1)  # a CPU-like curve
    assert steep[0]["name"] == "n1" and steep[0]["speedup"] == pytest.approx(1.4 / 1.2)
    assert {r["name"]: r["pareto"] for r in steep} == {"n1": True, "n4": False, "n8": False}
    interpolated = rerank(bank, _curve({1: 10.0, 9: 18.0}), 1)
    assert {r["name"]: r["cost"] for r in interpolated}["n4"] == pytest.approx(1.4)
    with pytest.raises(EntMTPError, match="beyond the measured 4"):
        rerank(bank, _curve({1: 10.0, 4: 12.0}), 1)
    with pytest.raises(EntMTPError, match="no batch 8"):
        rerank(bank, _curve({1: 10.0, 16: 10.0}), 8)


def test_cli_end_to_end(tmp_path, tiny_config, capsys):
    curve_path = tmp_path / "curve.json"
    assert entmtp(["search", "cost-curve", "--shape", str(tiny_config), "--tokens", "1,4,9", "--context", "8",
                   "--dtype", "float32", "--device", "cpu", "--repeats", "1", "--out", str(curve_path),
                   "--no-progress"]) == 0
    assert "batch 1: 1 token" in capsys.readouterr().out
    assert sorted(load_curve(curve_path).points) == [(1, 1), (1, 4), (1, 9)]
    out = tmp_path / "rerank"
    assert entmtp(["search", "rerank", _bank(tmp_path), "--cost-curve", str(curve_path), "--out", str(out)]) == 0
    shown = capsys.readouterr().out
    assert "| tree | nodes | τ | cost(n) | predicted × AR | Pareto |" in shown
    banks = list(out.glob("bank_*.json"))
    assert len(banks) == 1
    written = load_bank(banks[0])
    assert written.policy["tree"] in {t.name for t in written.trees}
    assert written.metadata["cost_curve"] == str(curve_path)


@pytest.mark.parametrize("argv, word", [
    (["search", "cost-curve", "--tokens", "1,x", "--out", "c.json"], "--tokens"),
    (["search", "cost-curve", "--tokens", "2,4", "--out", "c.json", "--device", "cpu"], "must include 1"),
    (["search", "cost-curve", "--shape", "nope", "--out", "c.json"], "named shape"),
])
def test_bad_input_is_one_line(argv, word, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert entmtp(argv) == 2
    assert word in capsys.readouterr().err


def test_a_bank_without_measurements_is_refused(tmp_path):
    path = tmp_path / "plain.json"
    save_bank(BankFile.model_validate({"trees": [{"name": "a", "choices": [[0]]}]}), path)
    with pytest.raises(EntMTPError, match="no measured accept length"):
        rerank(load_bank(path), _curve({1: 1.0, 2: 1.0}), 1)
