"""`entmtp search throughput|calibrate|regimes` end to end on a tiny saved model, and the Pareto set."""

from __future__ import annotations

import json

import pytest

from entmtp_vllm.bank_file import load_bank
from entmtp_vllm.cli.main import main as entmtp
from entmtp_vllm.policies import make_policy
from tree_search.throughput import pareto_front


def test_pareto_front():
    points = [("n1", 1, 10.0), ("n2", 2, 12.0), ("n4", 4, 11.0), ("n8", 8, 15.0), ("n16", 16, 15.0),
              ("ref", 8, 14.0), ("n3", 3, 12.0), ("n32", 32, 16.0)]
    # n4 is slower than n2; n16 only ties n8 while larger; n3 ties n2 while larger; ref is slower than n8
    assert pareto_front(points) == ["n1", "n2", "n8", "n32"]
    assert pareto_front([("a", 4, 9.0), ("b", 4, 9.5)]) == ["b"]  # same size: the faster
    assert pareto_front([("a", 4, 9.0), ("b", 4, 9.0)]) == ["a"]  # exact tie: the first listed
    assert pareto_front([]) == []
    fronts = pareto_front(points)
    sizes = [dict((n, s) for n, s, _ in points)[n] for n in fronts]
    speeds = [dict((n, t) for n, _, t in points)[n] for n in fronts]
    assert sizes == sorted(sizes) and speeds == sorted(speeds)


@pytest.fixture(scope="module")
def frontier_dir(tiny_folders, tmp_path_factory):
    model, heads = tiny_folders
    out = tmp_path_factory.mktemp("stages") / "mt_bench"
    assert entmtp(["search", "frontier", "--dataset", "mt_bench", "-n", "3", "--budget", "8", "--max-depth", "3",
                   "--max-tokens", "8", "--model", str(model), "--heads", str(heads), "--out", str(out),
                   "--no-progress", "--reference", "none"]) == 0
    return out


def test_throughput_calibrate_regimes(frontier_dir, tiny_folders, capsys):
    out = frontier_dir
    assert entmtp(["search", "throughput", "--frontier", str(out), "--sizes", "2,4,8", "--reference", "full:2,1",
                   "-n", "2", "--dtype", "float32", "--no-progress"]) == 0
    table = capsys.readouterr().out
    assert "# Throughput frontier" in table and "| AR |" in table and "`full:2,1`" in table
    assert "methods taking turns step by step" in table
    result = json.loads((out / "throughput" / "throughput.json").read_text())
    assert result["split"] == "test" and result["num_prompts"] == 2
    assert result["bench"]["methods"][0] == "ar" and len(result["bench"]["methods"]) == 5
    rows = {r["name"]: r for r in result["rows"]}
    assert set(rows) == {"n2", "n4", "n8", "full:2,1"} and not rows["full:2,1"]["frontier"]
    assert result["pareto"] == pareto_front([(r["name"], r["size"], r["tokens_per_second"])
                                             for r in result["rows"] if r["frontier"]])
    bank = load_bank(out / "throughput" / "bank_throughput.json")
    assert [t.name for t in bank.trees] == result["pareto"]
    for entry in bank.trees:
        assert entry.measured.tokens_per_second == pytest.approx(rows[entry.name]["tokens_per_second"])
        assert entry.measured.nodes == rows[entry.name]["size"] + 1
    assert bank.policy == {"kind": "static", "tree": result["best_static"]}
    assert (out / "throughput" / "throughput.png").stat().st_size > 0

    assert entmtp(["search", "calibrate", "--bank", str(out / "throughput" / "bank_throughput.json"),
                   "--frontier", str(out), "-n", "1", "--test-n", "1", "--check-top", "1", "--dtype", "float32",
                   "--no-progress"]) == 0
    table = capsys.readouterr().out
    assert "# Scheduler calibration" in table and "Held-out" in table
    cal = json.loads((out / "calibrate" / "calibrate.json").read_text())
    calibrated = load_bank(out / "throughput" / "bank_throughput.json")
    assert calibrated.policy == next(r["config"] for r in cal["rows"] if r["policy"] == cal["chosen"]["policy"])
    make_policy(calibrated.policy, calibrated.topology_bank())
    assert cal["chosen"]["predicted_tokens_per_second"] == max(r["predicted_tokens_per_second"] for r in cal["rows"])
    assert {r["family"] for r in cal["rows"]} >= {"static", "hysteresis"}
    probe = cal["step_costs"]  # the costs come from the step-cost probe (8 calibration prompts by default)
    assert cal["costs_from"] == "step_costs.json" and probe["prompts"] == 8
    assert {t["name"]: t["step_ms"] for t in cal["trees"]} == {n: r["step_ms"] for n, r in probe["trees"].items()}
    assert "costs from the step-cost probe" in table
    names = [r["name"] for r in cal["table1"]["rows"]]
    assert names[0] == "AR" and any(n.startswith("EntMTP*") for n in names)
    assert any(n.startswith("EntMTP^τ") for n in names)
    for row in cal["table1"]["rows"]:  # every policy but AR and EntMTP* itself, paired with EntMTP*
        assert ("vs_static" in row) == (row["name"] != "AR" and not row["name"].startswith("EntMTP*")), row["name"]
    # a rerun reuses the features and both engine runs
    assert entmtp(["search", "calibrate", "--bank", str(out / "throughput" / "bank_throughput.json"),
                   "--frontier", str(out), "-n", "1", "--test-n", "1", "--check-top", "1", "--dtype", "float32",
                   "--no-progress"]) == 0
    assert capsys.readouterr().err.count("reusing") == 3  # the step-cost probe too
    # held-out replay: the chosen policies over another split's trajectories (and never the same prompts)
    model, heads = tiny_folders
    held = out.parent / "mt_bench_test"
    assert entmtp(["search", "frontier", "--dataset", "mt_bench", "--split", "test", "-n", "2", "--budget", "2",
                   "--max-depth", "3", "--max-tokens", "8", "--model", str(model), "--heads", str(heads), "--out",
                   str(held), "--no-progress", "--reference", "none"]) == 0
    common = ["search", "calibrate", "--bank", str(out / "throughput" / "bank_throughput.json"), "--frontier", str(out),
              "-n", "0", "--test-n", "0", "--no-progress"]
    assert entmtp(common + ["--heldout", str(held)]) == 0
    assert "## Held-out replay: 2 prompts" in capsys.readouterr().out
    replayed = json.loads((out / "calibrate" / "calibrate.json").read_text())["heldout_replay"]
    assert replayed["prompts"] == 2 and replayed["rows"][0]["name"] == "EntMTP* (best static)"
    assert replayed["rows"][0]["vs_static"] == 1.0 and all(r["tau"] >= 1.0 for r in replayed["rows"])
    assert entmtp(common + ["--heldout", str(out)]) != 0
    assert "shares 3 prompts with the calibration" in capsys.readouterr().err

    assert entmtp(["search", "regimes", "--frontier", str(out), "--tree", "n4", "--folds", "3", "--no-progress"]) == 0
    table = capsys.readouterr().out
    assert "# Regimes" in table and "`path_value`" in table and "`lookup_match`" in table
    reg = json.loads((out / "regimes" / "regimes.json").read_text())
    assert reg["prompts"] == 3 and reg["rows"] > 0
    assert {"entropy", "entropy_ema_8", "recent_accept_mean", "p0", "head_top1_1"} <= set(reg["features"])
    assert entmtp(["search", "regimes", "--combine", str(out / "regimes" / "regimes.json"),
                   "--out", str(out / "combined")]) == 0
    assert (out / "combined" / "regimes_tasks.png").stat().st_size > 0


def test_summary_reports_and_copies(frontier_dir, tiny_folders, tmp_path, capsys):
    from tree_search.policy_grid import policy_string
    from tree_search.summary import summarize

    if not (frontier_dir / "throughput" / "throughput.json").is_file():
        pytest.skip("needs test_throughput_calibrate_regimes first")
    # the compare run (run_search.sh's compare stage): EntMTP* and the calibrated bank, paired
    model, heads = tiny_folders
    bank = frontier_dir / "throughput" / "bank_throughput.json"
    static = json.loads((frontier_dir / "calibrate" / "calibrate.json").read_text())["best"]["static"]
    assert entmtp(["bench", "offline", "--dataset", "mt_bench", "--split", "test", "-n", "2", "--max-tokens", "8",
                   "--model", str(model), "--heads", str(heads), "--methods", f"ar,bank:{bank}:{static},bank:{bank}",
                   "--baseline", "2", "--out", str(frontier_dir / "compare"), "--no-progress"]) == 0
    capsys.readouterr()
    result = summarize([frontier_dir], tmp_path / "docs")
    (task,) = result["tasks"]
    assert task["task"] == "mt_bench"
    assert task["stages"] == {"frontier": True, "debias": False, "throughput": True, "calibrate": True, "regimes": True}
    assert task["half_size"] is None  # no reference tree in this frontier
    assert set(task["timing"]) >= {"frontier calibration", "throughput", "calibrate", "regimes"}
    text = (tmp_path / "docs" / "summary.md").read_text()
    assert "| mt_bench | yes | yes | yes | yes | no |" in text and "Table-1 analogue" in text
    overview = next(line for line in text.splitlines() if line.startswith("| mt_bench | EntMTP^τ |"))
    assert overview.split(" | ")[4] not in ("–", "")  # the held-out replay of the last calibrate run
    compared = next(line for line in text.split("timed on more held-out prompts")[1].splitlines() if "| mt_bench |" in line)
    assert f"| `{static}` |" in compared and f"| `{policy_string(load_bank(bank).policy)}` |" in compared
    assert task["compare"]["rows"][0]["vs_baseline"]["prompts"] == 2
    assert "the methods taking turns step by step (`bench offline --baseline 2`)" in text
    for name in ("frontier.md", "throughput/bank_throughput.json", "calibrate/calibrate.md", "regimes/regimes.png",
                 "compare/offline.md"):
        assert (tmp_path / "docs" / "mt_bench" / name).is_file()
    assert entmtp(["search", "summary", "--runs", str(frontier_dir), "--out", str(tmp_path / "again")]) == 0
    assert "## (c) Wall time" in capsys.readouterr().out


def test_half_size_check_on_a_frontier_with_a_reference(tiny, tmp_path):
    from _search_parts import calibrate, random_prompts
    from tree_search.frontier import open_frontier_log, search_frontier
    from tree_search.report import write_frontier_outputs
    from tree_search.scoring import RankScorer
    from tree_search.summary import check_half_size
    from entmtp_vllm.tree import Tree

    model, drafter = tiny
    calibration = calibrate(model, drafter, random_prompts(3), path=tmp_path / "calibration.jsonl")
    settings = {"dataset": "synthetic", "split": "all", "seed": 0, "max_tokens": 24, "dtype": "float32",
                "scorer": "rank", "model": "tiny", "heads": "tiny", "budget": 12, "max_depth": 3}
    log = tmp_path / "frontier.jsonl"
    history = search_frontier(RankScorer(calibration), 12, 3, open_frontier_log(log, settings), log, progress=False)
    reference = Tree.from_spec("full:3,2,1")  # 3 + 6 + 6 = 15 draft nodes
    ref_tau = RankScorer(calibration).evaluate(reference).tau
    write_frontier_outputs({"settings": settings, "num_prompts": 3, "frontier": [s.as_record() for s in history],
                            "complete": True, "bank_sizes": [4], "timing": {"total_s": 0, "calibration_s": 0,
                            "search_s": 0, "resumed_steps": 0}, "reference": {"name": "ref", "size": 15, "depth": 3,
                            "tau": ref_tau, "steps": 1}}, tmp_path)
    check = check_half_size(tmp_path)
    taus = {s.size: RankScorer(calibration).evaluate(s.as_tree()).tau for s in history}
    assert check["half"] == 7 and check["largest_within_half"] == 7
    assert check["largest_within_half_tau"] == taus[7]
    reaching = [n for n in sorted(taus) if taus[n] >= ref_tau]
    assert check["smallest_reaching"] == (reaching[0] if reaching else None)
    assert check["passes"] == (bool(reaching) and reaching[0] <= 7)
