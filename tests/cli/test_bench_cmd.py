"""`entmtp bench offline` end to end on a tiny random Llama with SmolLM2's tokenizer and random heads."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from _tiny_saved_model import save_tiny_model
from entmtp_vllm.cli.main import main


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> tuple[Path, Path, Path]:
    """(model folder, Hydra heads folder, Medusa heads folder)."""
    model, (hydra, medusa) = save_tiny_model(tmp_path_factory.mktemp("bench"), ("hydra", "medusa"))
    return model, hydra, medusa


def test_bench_offline_end_to_end(tiny, tmp_path, capsys):
    model, hydra, medusa = tiny
    bank = tmp_path / "bank.json"
    bank.write_text(json.dumps({
        "format": "entmtp-bank", "version": 1,
        "trees": [{"name": "small", "choices": [[0], [0, 0]]}, {"name": "big", "choices": [[0], [1], [0, 0], [1, 0], [0, 0, 0]]}],
        "policy": {"kind": "hysteresis", "conservative": "small", "aggressive": "big", "tau_on": 0.001},
    }))
    out = tmp_path / "out"
    argv = [
        "bench", "offline", "--dataset", "mt_bench,humaneval", "-n", "2", "--max-tokens", "6", "--model", str(model),
        "--methods", "tree:full:2,1,bank:" + str(bank), "--methods", "medusa:chain:3",
        "--heads", str(hydra), "--medusa-heads", str(medusa), "--check-equal", "--out", str(out), "--no-progress",
        "--baseline", "2",
    ]
    assert main(argv) == 0, capsys.readouterr().err
    table = capsys.readouterr().out
    assert "| `ar` |" in table and "| `tree:full:2,1` |" in table and "| `medusa:chain:3` |" in table
    assert "equal AR's on every prompt" in table
    results = json.loads((out / "offline.json").read_text())
    assert list(results["methods"]) == ["ar", "tree:full:2,1", f"bank:{bank}", "medusa:chain:3"]
    assert results["num_prompts"] == 4 and results["machine"]["threads"] == 1
    assert results["config"]["interleave"] == "step" and "methods taking turns step by step" in table
    for label, summary in results["methods"].items():
        assert summary["mismatches"] == 0 and len(summary["prompts"]) == 4
        assert summary["tokens_per_second"] > 0 and summary["speedup"] > 0
        assert summary["mean_nodes"] == (1.0 if label == "ar" else summary["mean_nodes"])
    assert results["methods"]["ar"]["speedup"] == 1.0
    # --baseline 2: every other method paired with the static tree over the same 4 prompts
    assert results["baseline"] == "tree:full:2,1" and "vs_baseline" not in results["methods"]["tree:full:2,1"]
    for label in ("ar", f"bank:{bank}", "medusa:chain:3"):
        vs = results["methods"][label]["vs_baseline"]
        tps = results["methods"][label]["tokens_per_second"] / results["methods"]["tree:full:2,1"]["tokens_per_second"]
        assert vs["prompts"] == 4 and vs["ratio"] == pytest.approx(tps)
        assert vs["ratio_ci95"][0] <= vs["ratio"] <= vs["ratio_ci95"][1]
    assert "| `tree:full:2,1` |" in table and "| baseline |" in table
    assert results["methods"]["tree:full:2,1"]["mean_nodes"] == 5.0
    assert (out / "offline.md").read_text().startswith("Offline benchmark")
    assert (out / "offline.png").stat().st_size > 1000


def test_bench_offline_check_equal_needs_greedy(tiny, capsys):
    model, hydra, _ = tiny
    argv = ["bench", "offline", "--dataset", "mt_bench", "-n", "1", "--model", str(model), "--methods", "ar",
            "--temperature", "0.7", "--check-equal"]
    assert main(argv) == 2
    assert "--temperature 0" in capsys.readouterr().err


def test_bench_offline_bad_method_exits_2(capsys):
    assert main(["bench", "offline", "--dataset", "mt_bench", "--methods", "beam:4"]) == 2
    assert "invalid method 'beam:4'" in capsys.readouterr().err


def test_bench_offline_unknown_baseline_exits_2_before_loading(capsys):
    assert main(["bench", "offline", "--dataset", "mt_bench", "--model", "/nonexistent", "--methods", "ar",
                 "--baseline", "tree:chain:2"]) == 2
    err = capsys.readouterr().err
    assert "--baseline 'tree:chain:2' is neither a method nor a position" in err and "1 = ar" in err


def test_bench_offline_step_turns_with_repeats(tiny, tmp_path, capsys):
    """--interleave prompt --repeats 2: whole generations in turns, each prompt twice; the kept
    time is the faster run's and every method still reproduces AR's tokens. (The default, step
    turns, runs in test_bench_offline_end_to_end.)"""
    model, hydra, _ = tiny
    out = tmp_path / "out"
    argv = ["bench", "offline", "--dataset", "mt_bench", "-n", "2", "--max-tokens", "8", "--model", str(model),
            "--methods", "tree:full:2,1,tree:chain:2", "--heads", str(hydra), "--check-equal",
            "--interleave", "prompt", "--repeats", "2", "--out", str(out), "--no-progress"]
    assert main(argv) == 0, capsys.readouterr().err
    table = capsys.readouterr().out
    assert "methods taking turns prompt by prompt" in table and "the fastest of 2 runs" in table
    results = json.loads((out / "offline.json").read_text())
    assert results["config"]["interleave"] == "prompt" and results["config"]["repeats"] == 2
    for summary in results["methods"].values():
        assert summary["mismatches"] == 0 and summary["repeats_differ"] == 0
        for row in summary["prompts"]:
            assert len(row["times_s"]) == 2 and row["time_s"] == min(row["times_s"])
        assert summary["time_s"] == pytest.approx(sum(row["time_s"] for row in summary["prompts"]))


def test_bench_offline_bad_repeats_or_interleave_exit_2(capsys):
    assert main(["bench", "offline", "--dataset", "mt_bench", "--model", "/nonexistent", "--methods", "ar",
                 "--repeats", "0"]) == 2
    assert "--repeats must be at least 1 (got 0)" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_info:
        main(["bench", "offline", "--dataset", "mt_bench", "--methods", "ar", "--interleave", "token"])
    assert exit_info.value.code == 2
    assert "invalid choice: 'token'" in capsys.readouterr().err
