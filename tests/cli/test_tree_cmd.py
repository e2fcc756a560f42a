"""Tests for entmtp_vllm/cli/tree_cmd.py: `entmtp tree show`."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from entmtp_vllm.cli.main import main
from entmtp_vllm.cli.tree_cmd import buffers_json
from entmtp_vllm.topology import build_tree_buffers
from entmtp_vllm.tree import Tree


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_json_for_a_generated_shape(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "tree", "show", "chain:3", "--json")
    assert (code, err) == (0, "")
    obj = json.loads(out)
    assert obj["name"] == "chain:3"
    assert (obj["num_nodes"], obj["depth"]) == (4, 3)
    assert obj["nodes"] == [[], [0], [0, 0], [0, 0, 0]]
    assert obj["parents"] == [-1, 0, 1, 2]
    assert obj["depths"] == [0, 1, 2, 3]
    assert obj["ranks"] == [0, 0, 0, 0]
    assert obj["attention_mask"] == [[1, 0, 0, 0], [1, 1, 0, 0], [1, 1, 1, 0], [1, 1, 1, 1]]
    assert obj["retrieve_indices"] == [[0, 1, 2, 3]]


def test_json_is_the_buffers(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "tree", "show", "full:3,1", "--json")
    assert code == 0
    buffers = build_tree_buffers(Tree.from_spec("full:3,1"))
    obj = json.loads(out)
    assert obj == buffers_json("full:3,1", buffers)
    assert obj["retrieve_indices"] == [[0, 1, 4], [0, 2, 5], [0, 3, 6]]
    assert obj["medusa_gather"] == buffers.medusa_gather.tolist()


def test_json_pads_retrieve_rows(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = tmp_path / "t.json"
    path.write_text(json.dumps([[0], [1], [0, 0]]))
    code, out, _ = run(capsys, "tree", "show", str(path), "--json")
    assert code == 0
    assert json.loads(out)["retrieve_indices"] == [[0, 2, -1], [0, 1, 3]]


def test_json_several_trees(capsys: pytest.CaptureFixture[str], medusa_trees_file: Path,
                            medusa_trees: dict[str, list[list[int]]]) -> None:
    code, out, _ = run(capsys, "tree", "show", str(medusa_trees_file), "--json")
    assert code == 0
    obj = json.loads(out)
    assert list(obj) == ["trees"]
    assert list(obj["trees"]) == list(medusa_trees)
    assert obj["trees"]["mc_sim_7b_63"]["num_nodes"] == 64


def test_json_one_tree_by_name(capsys: pytest.CaptureFixture[str], medusa_trees_file: Path) -> None:
    code, out, _ = run(capsys, "tree", "show", str(medusa_trees_file), "--name", "mc_sim_7b_63", "--json")
    assert code == 0
    obj = json.loads(out)
    assert (obj["name"], obj["num_nodes"], obj["depth"]) == ("mc_sim_7b_63", 64, 4)
    assert obj["nodes"][0] == [] and obj["parents"][0] == -1
    assert len(obj["attention_mask"]) == 64 and len(obj["retrieve_indices"][0]) == 5


def test_human_summary_and_drawing(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "tree", "show", "full:2,1")
    assert code == 0
    assert out == (
        "full:2,1: 5 nodes (root included), depth 2, 2 leaves, top-k 2\n"
        "  nodes per depth 0..2: 1, 2, 2\n"
        "  children per node at depth 0..1 (max/mean): 2/2, 1/1\n"
        "  root #0\n"
        "  +-- 0 #1\n"
        "  |   `-- 0 #3\n"
        "  `-- 1 #2\n"
        "      `-- 0 #4\n"
    )


def test_human_output_for_several_trees(capsys: pytest.CaptureFixture[str], medusa_trees_file: Path) -> None:
    code, out, _ = run(capsys, "tree", "show", str(medusa_trees_file))
    assert code == 0
    assert "mc_sim_7b_63: 64 nodes (root included), depth 4, 42 leaves, top-k 10\n" in out
    assert "\n\nzephyr_stage2: " in out
    # 64 nodes is still drawn.
    assert "  |   |   |   +-- 0 #62\n" in out


def test_large_trees_are_not_drawn(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "tree", "show", "full:3^4")
    assert code == 0
    assert out.startswith("full:3^4: 121 nodes (root included), depth 4, 81 leaves")
    assert "root #0" not in out


def test_tree_alone_prints_its_help(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "tree")
    assert code == 2
    assert "usage: entmtp tree" in out and "show" in out


def _bad_version_bank(tmp_path: Path) -> str:
    path = tmp_path / "bank.json"
    path.write_text(json.dumps({"format": "entmtp-bank", "version": 7, "trees": []}))
    return str(path)


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (lambda tmp: ["tree", "show", str(tmp / "missing.json")], "no such file, and not a generated shape"),
        (lambda tmp: ["tree", "show", "chain:0"], "invalid tree spec 'chain:0'"),
        (lambda tmp: ["tree", "show", "full:2^x", "--json"], "accepted forms: chain:K"),
        (lambda tmp: ["tree", "show", _bad_version_bank(tmp)], "field 'version': unsupported version 7"),
        (lambda tmp: ["tree", "show", "chain:2", "--name", "other"], "no tree named 'other'; available: chain:2"),
    ],
)
def test_bad_input_is_one_line_exit_2(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                    argv: Callable[[Path], list[str]], expected: str) -> None:
    code, out, err = run(capsys, *argv(tmp_path))
    assert code == 2
    assert out == ""
    assert err.startswith("entmtp: error: ") and err.endswith("\n") and err.count("\n") == 1
    assert expected in err
    assert "Traceback" not in err


def test_unknown_name_in_a_file_lists_the_names(capsys: pytest.CaptureFixture[str], medusa_trees_file: Path) -> None:
    code, _, err = run(capsys, "tree", "show", str(medusa_trees_file), "--name", "nope")
    assert code == 2
    assert "no tree named 'nope'; available: mc_sim_7b_63, vicuna_7b_stage2" in err


def test_installed_console_script() -> None:
    script = Path(sys.executable).parent / "entmtp"
    if not script.exists():
        pytest.skip(f"console script {script} is not installed (pip install -e .)")
    done = subprocess.run([str(script), "tree", "show", "chain:3", "--json"], capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    obj = json.loads(done.stdout)
    assert obj["nodes"] == [[], [0], [0, 0], [0, 0, 0]]
    assert obj["retrieve_indices"] == [[0, 1, 2, 3]]
