"""Tests for entmtp_vllm/bank_file.py: the bank format, its errors, and tree sources."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from entmtp_vllm import bank_file
from entmtp_vllm.bank_file import BankFile, BankTree, TreeMeasurement, load_bank, load_tree_source, save_bank
from entmtp_vllm.errors import EntMTPError
from entmtp_vllm.tree import Tree


def _bank_data(**overrides: object) -> dict[str, object]:
    data: dict[str, object] = {
        "format": "entmtp-bank",
        "version": 1,
        "model": "SmolLM2-135M-Instruct",
        "task": "mt-bench",
        "created": "2025-01-31T12:00:00+00:00",
        "trees": [
            {"name": "small", "choices": [[0], [0, 0]], "measured": {"accept_length": 1.8, "nodes": 3}},
            {"name": "wide", "choices": [[0], [1], [2]]},
        ],
        "policy": {"kind": "static", "tree": "small"},
        "metadata": {"search": {"budget": 64}},
    }
    data.update(overrides)
    return data


def _write(path: Path, data: object) -> Path:
    path.write_text(json.dumps(data))
    return path


def test_load_valid_bank(tmp_path: Path) -> None:
    bank = load_bank(_write(tmp_path / "b.json", _bank_data()))
    assert [entry.name for entry in bank.trees] == ["small", "wide"]
    assert bank.trees[0].measured == TreeMeasurement(accept_length=1.8, nodes=3)
    assert bank.policy == {"kind": "static", "tree": "small"}
    assert isinstance(bank.policy, dict)
    topo = bank.topology_bank()
    assert topo.names == ("small", "wide")
    assert topo.tree(1) == Tree.from_choices([[0], [1], [2]])
    assert topo.buffers(0).num_nodes == 3


def test_defaults() -> None:
    bank = BankFile(trees=[BankTree(name="t", choices=[[0]])])
    assert (bank.format, bank.version, bank.model, bank.task, bank.policy, bank.metadata) == (
        "entmtp-bank", 1, None, None, None, {})
    assert "T" in bank.created


def test_every_field_is_documented() -> None:
    for model in (BankFile, BankTree, TreeMeasurement):
        for name, field in model.model_fields.items():
            assert field.description, f"{model.__name__}.{name} has no docstring"


def test_save_is_pretty_and_exact(tmp_path: Path) -> None:
    bank = load_bank(_write(tmp_path / "in.json", _bank_data()))
    out = tmp_path / "out.json"
    save_bank(bank, out)
    text = out.read_text()
    assert "\n      \"choices\": [\n        [0],\n        [0, 0]\n      ]," in text
    assert load_bank(out) == bank
    assert json.loads(text) == bank.model_dump(mode="json")
    save_bank(load_bank(out), out)
    assert out.read_text() == text
    assert sorted(os.listdir(tmp_path)) == ["in.json", "out.json"]


def test_saved_banks_get_the_permissions_of_a_plain_write(tmp_path: Path) -> None:
    """Not the 0600 of the temporary file it is written through: a new file gets 0666 less the
    umask, a replaced file keeps its mode."""
    bank = BankFile(trees=[BankTree(name="t", choices=[[0]])])
    old = os.umask(0o022)
    try:
        save_bank(bank, tmp_path / "new.json")
        assert (tmp_path / "new.json").stat().st_mode & 0o777 == 0o644
        kept = tmp_path / "kept.json"
        kept.write_text("{}")
        kept.chmod(0o640)
        save_bank(bank, kept)
        assert kept.stat().st_mode & 0o777 == 0o640 and load_bank(kept) == bank
    finally:
        os.umask(old)


def test_failed_save_keeps_the_old_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "bank.json"
    out.write_text("old")

    def refuse(src: str, dst: str) -> None:
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(bank_file.os, "replace", refuse)
    with pytest.raises(EntMTPError, match=f"bank file {out}: cannot write it"):
        save_bank(BankFile(trees=[BankTree(name="t", choices=[[0]])]), out)
    assert out.read_text() == "old"
    assert os.listdir(tmp_path) == ["bank.json"]


def test_save_into_missing_folder(tmp_path: Path) -> None:
    with pytest.raises(EntMTPError, match="cannot write it"):
        save_bank(BankFile(trees=[BankTree(name="t", choices=[[0]])]), tmp_path / "nope" / "b.json")


_json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(10**6), 10**6)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8)
)
_json = st.recursive(
    _json_scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=8,
)


@st.composite
def banks(draw: st.DrawFn) -> BankFile:
    trees = draw(st.lists(st.from_type(Tree), min_size=1, max_size=4))
    names = draw(st.lists(st.text(min_size=1, max_size=10), min_size=len(trees), max_size=len(trees), unique=True))
    entries = []
    for name, tree in zip(names, trees):
        measured = draw(st.none() | st.builds(
            TreeMeasurement,
            accept_length=st.floats(1.0, 10.0),
            tokens_per_second=st.none() | st.floats(0.001, 1e6),
            nodes=st.just(tree.num_nodes),
            steps=st.none() | st.integers(1, 10**6),
        ))
        entries.append(BankTree(name=name, choices=draw(st.permutations(tree.choices)), measured=measured))
    policy = draw(st.none() | st.sampled_from(names).map(lambda name: {"kind": "static", "tree": name}))
    return BankFile(
        model=draw(st.none() | st.text(max_size=20)),
        task=draw(st.none() | st.text(max_size=20)),
        trees=entries,
        policy=policy,
        metadata=draw(st.dictionaries(st.text(max_size=6), _json, max_size=3)),
    )


@settings(max_examples=30, deadline=None)
@given(banks())
def test_round_trip(tmp_path_factory: pytest.TempPathFactory, bank: BankFile) -> None:
    path = tmp_path_factory.mktemp("bank") / "bank.json"
    save_bank(bank, path)
    again = load_bank(path)
    assert again == bank
    assert again.model_dump() == bank.model_dump()


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        ([1, 2], "expected a JSON object"),
        (_bank_data(format="other"), "field 'format': got 'other', expected 'entmtp-bank'"),
        ({k: v for k, v in _bank_data().items() if k != "format"}, "field 'format': missing"),
        (_bank_data(version=2), "field 'version': unsupported version 2; this EntMTP reads version 1"),
        (_bank_data(version="1"), "field 'version': unsupported version '1'"),
        (_bank_data(version=True), "field 'version': unsupported version True"),
        ({k: v for k, v in _bank_data().items() if k != "version"}, "field 'version': missing"),
        ({k: v for k, v in _bank_data().items() if k != "trees"}, "field 'trees': Field required"),
        (_bank_data(trees=[]), "field 'trees': List should have at least 1 item"),
        (_bank_data(trees=[{"name": "a"}]), "field 'trees.0.choices': Field required"),
        (_bank_data(trees=[{"name": "a", "choices": [[0, 2]]}], policy=None),
         "field 'trees.0': tree 'a': invalid tree: path [0, 2] has no parent path [0]"),
        (_bank_data(trees=[{"name": "a", "choices": [[0], [0]]}], policy=None),
         "field 'trees.0': tree 'a': invalid tree: path [0] is listed twice"),
        (_bank_data(trees=[{"name": "a", "choices": [[0], []]}], policy=None),
         "field 'trees.0': tree 'a': invalid tree: path [] given explicitly"),
        (_bank_data(trees=[{"name": "a", "choices": [[0], [-3]]}], policy=None),
         "field 'trees.0': tree 'a': invalid tree: path [-3] has a negative rank -3"),
        (_bank_data(trees=[{"name": "a", "choices": [[0], [True]]}]),
         "field 'trees.0.choices.1.0': Input should be a valid integer (got True)"),
        (_bank_data(trees=[{"name": "a", "choices": [[0], [1.0]]}]),
         "field 'trees.0.choices.1.0': Input should be a valid integer"),
        (_bank_data(trees=[{"name": "a", "choices": [[0], 1]}]),
         "field 'trees.0.choices.1': Input should be a valid list"),
        (_bank_data(trees=[{"name": "", "choices": [[0]]}]), "field 'trees.0.name'"),
        (_bank_data(trees=[{"name": "a", "choices": [[0]], "colour": "red"}]),
         "field 'trees.0.colour': Extra inputs are not permitted"),
        (_bank_data(trees=[{"name": "a", "choices": [[0]]}, {"name": "a", "choices": [[0]]}], policy=None),
         "field 'trees': tree name 'a' is used by trees 0 and 1; names must be unique"),
        (_bank_data(trees=[{"name": "a", "choices": [[0]], "measured": {"accept_length": 1.5, "nodes": 5}}],
                    policy=None),
         "field 'trees.0': tree 'a': measured.nodes is 5 but the tree has 2 nodes"),
        (_bank_data(trees=[{"name": "a", "choices": [[0]], "measured": {"accept_length": 0.5, "nodes": 2}}],
                    policy=None),
         "field 'trees.0.measured.accept_length': Input should be greater than or equal to 1"),
        (_bank_data(trees=[{"name": "a", "choices": [[0]], "measured": {"nodes": 2}}], policy=None),
         "field 'trees.0.measured.accept_length': Field required"),
        (_bank_data(created="yesterday"), "field 'created': 'yesterday' is not an ISO 8601 time"),
        (_bank_data(model=3), "field 'model': Input should be a valid string"),
        (_bank_data(metadata=[]), "field 'metadata': Input should be a valid dictionary"),
        (_bank_data(colour="red"), "field 'colour': Extra inputs are not permitted"),
        (_bank_data(policy={"kind": "static", "tree": "huge"}), "field 'policy': invalid policy config:"),
        (_bank_data(policy={"kind": "psychic"}), "field 'policy': invalid policy config:"),
    ],
)
def test_bad_bank_names_the_field(tmp_path: Path, data: object, expected: str) -> None:
    path = _write(tmp_path / "b.json", data)
    with pytest.raises(EntMTPError) as info:
        load_bank(path)
    message = str(info.value)
    assert message.startswith(f"bank file {path}: ")
    assert expected in message
    assert "\n" not in message


def test_several_problems_are_counted(tmp_path: Path) -> None:
    path = _write(tmp_path / "b.json", _bank_data(model=1, task=2, colour=3))
    with pytest.raises(EntMTPError, match=r"field 'model': .* \(and 2 more problems\)$"):
        load_bank(path)


def test_unknown_policy_tree_is_named(tmp_path: Path) -> None:
    path = _write(tmp_path / "b.json", _bank_data(policy={"kind": "static", "tree": "huge"}))
    with pytest.raises(EntMTPError, match="'huge'"):
        load_bank(path)


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (None, "no such file"),
        (b"{not json", "invalid JSON at line 1 column 2"),
        (b"", "invalid JSON at line 1 column 1"),
        (b"\xff\xfe\x00", "not UTF-8 text"),
    ],
)
def test_unreadable_bank_file(tmp_path: Path, content: bytes | None, expected: str) -> None:
    path = tmp_path / "b.json"
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(EntMTPError, match=f"^bank file {path}: {expected}"):
        load_bank(path)


def test_directory_is_not_a_bank(tmp_path: Path) -> None:
    with pytest.raises(EntMTPError, match="cannot read it"):
        load_bank(tmp_path)


def test_source_generated_shape() -> None:
    assert load_tree_source("chain:3") == [("chain:3", Tree.from_spec("chain:3"))]
    assert load_tree_source("full:2^2", name="full:2^2") == [("full:2^2", Tree.from_spec("full:2^2"))]


def test_source_bad_spec_lists_the_forms() -> None:
    with pytest.raises(EntMTPError, match=r"invalid tree spec 'chain:x'; accepted forms: chain:K"):
        load_tree_source("chain:x")


def test_source_missing_file(tmp_path: Path) -> None:
    with pytest.raises(EntMTPError, match="no such file, and not a generated shape; .* chain:K"):
        load_tree_source(str(tmp_path / "nope.json"))


def test_source_medusa_file(medusa_trees_file: Path, medusa_trees: dict[str, list[list[int]]]) -> None:
    trees = load_tree_source(str(medusa_trees_file))
    assert [name for name, _ in trees] == list(medusa_trees)
    assert all(tree == Tree.from_choices(medusa_trees[name]) for name, tree in trees)
    [(name, tree)] = load_tree_source(str(medusa_trees_file), name="mc_sim_7b_63")
    assert (name, tree.num_nodes, tree.depth) == ("mc_sim_7b_63", 64, 4)


def test_source_unknown_name_lists_the_available_ones(medusa_trees_file: Path) -> None:
    with pytest.raises(EntMTPError, match=r"no tree named 'nope'; available: mc_sim_7b_63, "):
        load_tree_source(str(medusa_trees_file), name="nope")


def test_source_bare_list_is_named_after_the_file(tmp_path: Path) -> None:
    path = _write(tmp_path / "mine.json", [[0], [0, 0]])
    assert load_tree_source(str(path)) == [("mine", Tree.from_choices([[0], [0, 0]]))]


def test_source_object_of_trees(tmp_path: Path) -> None:
    path = _write(tmp_path / "t.json", {"a": [[0]], "b": [[0], [1]]})
    assert [name for name, _ in load_tree_source(str(path))] == ["a", "b"]
    assert load_tree_source(str(path), name="b") == [("b", Tree.from_choices([[0], [1]]))]


def test_source_name_skips_other_trees(tmp_path: Path) -> None:
    path = _write(tmp_path / "t.json", {"good": [[0]], "bad": [[0, 1]]})
    assert load_tree_source(str(path), name="good") == [("good", Tree.from_choices([[0]]))]
    with pytest.raises(EntMTPError) as info:
        load_tree_source(str(path))
    assert str(info.value) == f"tree file {path}: tree 'bad': invalid tree: path [0, 1] has no parent path [0]"


def test_source_bank_file(tmp_path: Path) -> None:
    path = _write(tmp_path / "b.json", _bank_data())
    assert [name for name, _ in load_tree_source(str(path))] == ["small", "wide"]
    assert load_tree_source(str(path), name="wide") == [("wide", Tree.from_choices([[0], [1], [2]]))]
    with pytest.raises(EntMTPError, match=f"bank file {path}: no tree named 'x'; available: small, wide"):
        load_tree_source(str(path), name="x")


def test_source_wrong_version_bank(tmp_path: Path) -> None:
    path = _write(tmp_path / "b.json", _bank_data(version=9))
    with pytest.raises(EntMTPError, match="field 'version': unsupported version 9"):
        load_tree_source(str(path))


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        ({}, "no trees in it"),
        (5, "expected a list of paths or an object mapping names to lists of paths"),
        ({"trees": [[0]]}, "field 'trees' must map tree names to lists of paths"),
        ({"a": "oops"}, "tree 'a': invalid tree: expected a list of paths, got str"),
    ],
)
def test_source_bad_choices_file(tmp_path: Path, data: object, expected: str) -> None:
    path = _write(tmp_path / "t.json", data)
    with pytest.raises(EntMTPError) as info:
        load_tree_source(str(path))
    assert f"tree file {path}: " in str(info.value)
    assert expected in str(info.value)


SHIPPED_BANKS = sorted((Path(__file__).resolve().parents[1] / "entmtp_vllm" / "assets" / "banks").glob("*.json"))


@pytest.mark.parametrize("path", SHIPPED_BANKS, ids=[p.stem for p in SHIPPED_BANKS])
def test_shipped_banks_load_and_fit_the_shipped_heads(path: Path) -> None:
    """Every bank shipped in the package (the default and one per task from the tree search)
    loads, builds its topology and needs no more heads than the shipped Hydra heads have."""
    from entmtp_vllm.heads.checkpoint import default_heads_path, read_heads_config
    from entmtp_vllm.topology import TopologyBank

    bank = load_bank(path)
    trees = [entry.tree() for entry in bank.trees]
    topology = TopologyBank(trees, [entry.name for entry in bank.trees])
    heads = default_heads_path("hydra")
    if heads.is_dir():
        assert topology.head_depth <= int(read_heads_config(heads)["num_heads"])
    assert bank.policy is not None and len(SHIPPED_BANKS) >= 5


def test_resolve_trees_takes_the_policy_given_then_the_banks_then_static(tmp_path: Path) -> None:
    from entmtp_vllm.bank_file import resolve_trees
    from entmtp_vllm.policies import HysteresisPolicy, StaticPolicy

    path = tmp_path / "bank.json"
    bank = BankFile(
        trees=[BankTree(name="small", choices=[[0]]), BankTree(name="wide", choices=[[0], [1]])],
        policy={"kind": "hysteresis", "conservative": "small", "aggressive": "wide", "tau_on": 0.5},
    )
    save_bank(bank, path)
    topology, policy = resolve_trees(path)
    assert list(topology.names) == ["small", "wide"] and isinstance(policy, HysteresisPolicy)
    _, given = resolve_trees(path, policy="static:wide")
    assert isinstance(given, StaticPolicy) and given.initial == 1
    one, narrowed = resolve_trees(path, name="wide")  # one tree kept: the bank's policy cannot apply
    assert list(one.names) == ["wide"] and isinstance(narrowed, StaticPolicy) and narrowed.initial == 0
    shape, default = resolve_trees("full:2,1")
    assert len(shape) == 1 and isinstance(default, StaticPolicy)
    with pytest.raises(EntMTPError, match="no such file"):
        resolve_trees(tmp_path / "missing.json")


def test_engine_bank_option_takes_bank_files_only(tmp_path: Path) -> None:
    from entmtp_vllm.engine.loading import load_trees

    choices = tmp_path / "choices.json"
    choices.write_text('{"small": [[0]]}')
    with pytest.raises(EntMTPError, match="not an EntMTP bank file"):
        load_trees(bank=str(choices))
    topology, _, label = load_trees(tree=str(choices))  # --tree takes it
    assert list(topology.names) == ["small"] and label == f"tree:{choices}"
