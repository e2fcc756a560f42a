"""(c) banks written by the search load back and validate; (e) bad input is one clear error;
`entmtp search ...` and `python -m tree_search ...` end to end on a tiny saved model."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from entmtp_vllm.bank_file import load_bank, load_tree_source
from entmtp_vllm.cli.main import main as entmtp
from entmtp_vllm.engine.loading import load_drafter, load_target, load_trees
from entmtp_vllm.engine.reference import ReferenceEngine
from entmtp_vllm.errors import EntMTPError
from tree_search.cli import main as tree_search_main
from tree_search.frontier import FrontierConfig, run_frontier


def frontier_args(model, heads, out, *extra):
    return ["--dataset", "mt_bench", "-n", "2", "--budget", "8", "--max-depth", "3", "--max-tokens", "8",
            "--model", str(model), "--heads", str(heads), "--out", str(out), "--no-progress", *extra]


@pytest.fixture(scope="module")
def searched(tiny_folders, tmp_path_factory):
    """A finished `entmtp search frontier` run folder (budget 8) and its captured outputs."""
    model, heads = tiny_folders
    out = tmp_path_factory.mktemp("run") / "mt_bench"
    assert entmtp(["search", "frontier", *frontier_args(model, heads, out)]) == 0
    return out


def test_frontier_writes_a_bank_that_loads_and_validates(searched, tiny_folders, capsys):
    model, heads = tiny_folders
    bank = load_bank(searched / "bank.json")
    assert [t.name for t in bank.trees] == ["n4", "n8"]
    assert bank.task == "mt_bench"
    frontier = json.loads((searched / "frontier.json").read_text())
    by_size = {s["size"]: s for s in frontier["frontier"]}
    for entry in bank.trees:
        size = int(entry.name[1:])
        assert entry.tree().num_nodes == size + 1 == entry.measured.nodes
        assert entry.measured.accept_length == pytest.approx(by_size[size]["tau"])
        assert entry.measured.steps == by_size[size]["steps"]
        assert entry.tree().depth <= 3
    assert [name for name, _ in load_tree_source(str(searched / "bank.json"))] == ["n4", "n8"]
    assert entmtp(["tree", "show", str(searched / "bank.json")]) == 0
    shown = capsys.readouterr().out
    assert "n4: 5 nodes (root included)" in shown and "n8: 9 nodes" in shown

    # the bank drives the reference engine, and greedy decoding still equals AR
    topology, policy, _ = load_trees(bank=str(searched / "bank.json"), policy="static:n8")
    lm, tokenizer = load_target(str(model))
    engine = ReferenceEngine(lm, tokenizer, load_drafter(str(heads), lm), topology, policy)
    prompt = tokenizer("Hello there")["input_ids"]
    assert engine.generate(prompt, 6).token_ids == engine.generate(prompt, 6, method="ar").token_ids

    assert (searched / "frontier.png").stat().st_size > 0
    table = (searched / "frontier.md").read_text()
    assert "| 8 | " in table and "n8" in table
    assert [s["size"] for s in frontier["frontier"]] == list(range(1, 9))


def test_frontier_names_the_reference_tree_and_why_it_is_not_scored(searched, medusa_trees_file):
    """The published reference tree (read from the shared trees file: skipped without it)."""
    frontier = json.loads((searched / "frontier.json").read_text())
    assert "mc_sim_7b_63" in (searched / "frontier.md").read_text()
    assert frontier["reference"]["skipped"] == "depth 4 > 3 heads"


def test_hybrid_frontier_reuses_the_calibration_and_writes_a_hybrid_bank(searched, tiny_folders, tmp_path):
    import shutil

    model, heads = tiny_folders
    out = tmp_path / "hybrid"
    out.mkdir()
    shutil.copy(searched / "calibration.jsonl", out / "calibration.jsonl")
    assert entmtp(["search", "frontier", *frontier_args(model, heads, out, "--lookup", "3")]) == 0
    frontier = json.loads((out / "frontier.json").read_text())
    assert frontier["settings"]["lookup"] == 3
    assert (out / "calibration.jsonl").read_text() == (searched / "calibration.jsonl").read_text()  # reused as is
    heads_only = json.loads((searched / "frontier.json").read_text())["frontier"]
    assert frontier["frontier"][-1]["tau"] >= heads_only[-1]["tau"]
    for entry in load_bank(out / "bank.json").trees:
        tree = entry.tree()
        assert tree.head_depth <= 3 and tree.lookup_length <= 3
    # a hybrid bank drives the reference engine, greedy decoding still equal to AR
    topology, policy, _ = load_trees(bank=str(out / "bank.json"), policy="static:n8")
    lm, tokenizer = load_target(str(model))
    engine = ReferenceEngine(lm, tokenizer, load_drafter(str(heads), lm), topology, policy)
    prompt = tokenizer("Hello there, hello there, hello")["input_ids"]
    assert engine.generate(prompt, 8).token_ids == engine.generate(prompt, 8, method="ar").token_ids


def test_rerunning_resumes_without_new_steps(searched, tiny_folders, capsys):
    model, heads = tiny_folders
    before = (searched / "frontier.jsonl").read_text()
    assert entmtp(["search", "frontier", *frontier_args(model, heads, searched)]) == 0
    err = capsys.readouterr().err
    assert "resuming" in err and "8 of 8 nodes already chosen" in err
    assert (searched / "frontier.jsonl").read_text() == before
    timing = json.loads((searched / "frontier.json").read_text())["timing"]
    assert timing["resumed_steps"] == 8 and timing["new_steps"] == 0


def test_debias_compares_with_the_self_rollout(searched, tmp_path, capsys):
    out = tmp_path / "debias"
    assert entmtp(["search", "debias", "--frontier", str(searched), "--sizes", "2,4", "--out", str(out),
                   "--reference", "full:2,1", "--no-progress"]) == 0
    printed = capsys.readouterr().out
    assert "| `n2` | 2 |" in printed and "| `full:2,1` | 4 |" in printed
    results = json.loads((out / "debias.json").read_text())
    rows = {r["name"]: r for r in results["rows"]}
    assert set(rows) == {"n2", "n4", "full:2,1"}
    for name in ("n2", "n4"):
        row = rows[name]
        assert row["self"] >= 1.0 and row["steps"] > 0
        assert row["delta_pct"] == pytest.approx(100 * (row["biased"] - row["self"]) / row["self"])
        assert row["ar_mismatches"] == 0  # greedy tree decoding reproduces the AR trajectory
        assert row["teacher_forced"] == pytest.approx(row["self"])  # the scorer's own rollout is the engine's
        assert row["rank_changed"] == (row["rank_biased"] != row["rank_self"])
    bank = load_bank(out / "bank_debiased.json")
    assert [t.name for t in bank.trees] == ["n2", "n4"]
    assert bank.trees[0].measured.tokens_per_second is not None


def test_python_m_tree_search_runs_the_same_commands(tiny_folders, tmp_path, capsys):
    model, heads = tiny_folders
    out = tmp_path / "via_module"
    assert tree_search_main(["frontier", *frontier_args(model, heads, out, "--reference", "full:2,1", "--bank-sizes", "2,3")]) == 0
    results = json.loads((out / "frontier.json").read_text())
    assert results["reference"]["name"] == "full:2,1" and results["reference"]["tau"] >= 1.0
    assert [t.name for t in load_bank(out / "bank.json").trees] == ["n2", "n3"]
    help_text = subprocess.run([sys.executable, "-m", "tree_search", "frontier", "--help"], capture_output=True,
                               text=True, check=True).stdout
    assert "--budget" in help_text and "what-if" in help_text


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--budget", "0"], "--budget must be at least 1"),
        (["--max-depth", "5"], "--max-depth 5 is deeper than the heads: they draft 3 tokens"),
        (["--max-depth", "0"], "--max-depth must be at least 1"),
        (["--max-tokens", "0"], "--max-tokens must be at least 1"),
        (["--lookup", "-1"], "--lookup must be at least 0"),
        (["--lookup", "2", "--scorer", "forward"], "--lookup needs the rank scorer"),
    ],
)
def test_bad_frontier_arguments_are_one_clear_error(tiny_folders, tmp_path, capsys, extra, message):
    model, heads = tiny_folders
    assert entmtp(["search", "frontier", *frontier_args(model, heads, tmp_path / "o"), *extra]) == 2
    err = capsys.readouterr().err
    assert err.startswith("entmtp: error: ") and message in err and "Traceback" not in err
    assert not (tmp_path / "o" / "frontier.jsonl").exists()  # refused before anything was written


def test_unknown_dataset_is_one_clear_error(tiny_folders, tmp_path, capsys):
    model, heads = tiny_folders
    args = frontier_args(model, heads, tmp_path / "o")
    args[args.index("mt_bench")] = "nope"
    assert entmtp(["search", "frontier", *args]) == 2
    assert "entmtp: error: unknown prompt set 'nope'" in capsys.readouterr().err
    assert tree_search_main(["frontier", *args]) == 2
    assert "tree_search: error: unknown prompt set 'nope'" in capsys.readouterr().err
    with pytest.raises(EntMTPError, match="unknown prompt set 'nope'"):
        run_frontier(FrontierConfig(dataset="nope", out=str(tmp_path / "o")), progress=False)


def test_resume_with_other_settings_is_refused(searched, tiny_folders, capsys):
    model, heads = tiny_folders
    args = frontier_args(model, heads, searched)
    args[args.index("--budget") + 1] = "6"
    assert entmtp(["search", "frontier", *args]) == 2
    err = capsys.readouterr().err
    assert "other settings (budget: 8 in the folder, 6 now)" in err and "use another --out folder" in err


def test_bad_debias_input(searched, tmp_path, capsys):
    assert entmtp(["search", "debias", "--frontier", str(tmp_path / "empty"), "--no-progress"]) == 2
    assert "no frontier log at" in capsys.readouterr().err
    assert entmtp(["search", "debias", "--frontier", str(searched), "--sizes", "99", "--no-progress"]) == 2
    assert "size 99 is not on the frontier" in capsys.readouterr().err
    assert entmtp(["search", "debias", "--frontier", str(searched), "--sizes", "a,b", "--no-progress"]) == 2
    assert "--sizes takes comma-separated integers" in capsys.readouterr().err


def test_a_failed_start_does_not_block_a_corrected_rerun(tiny_folders, tmp_path, capsys):
    """A run that fails before choosing any node (here a mistyped --model) leaves no settings to resume."""
    model, heads = tiny_folders
    out = tmp_path / "o"
    assert entmtp(["search", "frontier", *frontier_args(tmp_path / "no_such_model", heads, out)]) == 2
    assert "no_such_model" in capsys.readouterr().err
    args = frontier_args(model, heads, out, "--budget", "3", "--bank-sizes", "3")
    assert entmtp(["search", "frontier", *args]) == 0
    assert [s["size"] for s in json.loads((out / "frontier.json").read_text())["frontier"]] == [1, 2, 3]
    assert oct((out / "bank.json").stat().st_mode & 0o777) == "0o644"
