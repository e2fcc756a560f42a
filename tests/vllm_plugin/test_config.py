"""`EntMTPConfig` validation, and vLLM refusing to start on a bad EntMTP setting (no engine)."""

from __future__ import annotations

import pytest

from entmtp_vllm.errors import EntMTPError
from entmtp_vllm.vllm_plugin.config import DEFAULT_BATCH_FALLBACK, EntMTPConfig, parse_config, resolve

pytestmark = pytest.mark.vllm


def test_defaults_are_the_shipped_bank():
    resolved = resolve(parse_config(None), num_speculative_tokens=6)
    assert resolved.bank.names == ("hydra", "loop")  # the shipped bank re-ranked on vLLM
    assert resolved.bank.tree(0).num_nodes == 3  # Hydra heads 1-2 as a chain
    assert resolved.bank.max_nodes <= 7
    assert resolved.policy.feature == "lookup_match"  # the bank's own policy
    # the step budget sizes trees under load; no batch-size fallback unless asked for
    assert resolved.fallback_tree is None and resolved.fallback_max_batch is None
    assert EntMTPConfig().budget is not None and EntMTPConfig().batch_fallback is None
    # the former default stays available as an explicit override ("auto": the lookup chain)
    former = resolve(EntMTPConfig(batch_fallback=DEFAULT_BATCH_FALLBACK), num_speculative_tokens=6)
    assert former.fallback_tree == 1 and former.fallback_max_batch == 4
    assert EntMTPConfig().typical.epsilon == 0.09


@pytest.mark.parametrize(
    "raw, words",
    [
        ({"acceptance": "fast"}, ["acceptance"]),
        ({"bogus": 1}, ["bogus"]),
        ({"typical": {"epsilon": 2}}, ["typical.epsilon"]),
        ({"bank": "chain:0"}, ["chain:0"]),
        ({"policy": "static:nope"}, ["nope"]),
        ({"batch_fallback": {"max_batch": 4, "tree": "missing"}}, ["batch_fallback", "missing"]),
        ({"batch_fallback": {"max_batch": 4, "min_match": 0}}, ["batch_fallback.min_match"]),
        ({"budget": {"memory": 1}}, ["budget.memory"]),
        ({"budget": {"prior": {"per_token_ms": -1}}}, ["budget.prior.per_token_ms"]),
        ("[1, 2]", ["must be a JSON object"]),
    ],
)
def test_bad_settings_are_one_clear_line(raw, words):
    with pytest.raises(EntMTPError) as info:
        resolve(parse_config(raw), num_speculative_tokens=6)
    message = str(info.value)
    assert "\n" not in message
    for word in words:
        assert word in message


def test_tree_larger_than_num_speculative_tokens_names_the_fix():
    with pytest.raises(EntMTPError, match='"num_speculative_tokens": 6'):
        resolve(parse_config({"bank": "full:2,1,1"}), num_speculative_tokens=4)


def test_missing_heads_folder_is_one_line(tmp_path):
    from entmtp_vllm.vllm_plugin.config import heads_folder

    with pytest.raises(EntMTPError, match="no such folder"):
        heads_folder(parse_config({"heads": str(tmp_path / "nope")}))


def test_policy_from_string_and_object():
    bank_spec = {"bank": "full:2,1,1"}
    assert resolve(parse_config({**bank_spec, "policy": "static:0"}), 6).policy.initial == 0
    obj = {"kind": "static", "tree": "full:2,1,1"}
    assert resolve(parse_config({**bank_spec, "policy": obj}), 6).policy.initial == 0


@pytest.mark.slow
def test_vllm_refuses_to_start(model_path):
    """The plugin validates while vLLM builds its config, before any model is loaded."""
    from vllm.engine.arg_utils import EngineArgs

    args = EngineArgs(
        model=model_path,
        enforce_eager=True,
        speculative_config={"model": "entmtp_vllm.EntMTP", "num_speculative_tokens": 2},
        additional_config={"entmtp": {"bank": "full:2,1,1"}},
    )
    with pytest.raises(EntMTPError, match="num_speculative_tokens"):
        args.create_engine_config()


@pytest.mark.slow
def test_plugin_selects_the_worker(model_path, heads_folder):
    from vllm.engine.arg_utils import EngineArgs

    args = EngineArgs(
        model=model_path,
        enforce_eager=True,
        speculative_config={"model": "entmtp_vllm.EntMTP", "num_speculative_tokens": 6},
        additional_config={"entmtp": {"heads": heads_folder}},
    )
    config = args.create_engine_config()
    assert config.parallel_config.worker_cls == "entmtp_vllm.vllm_plugin.cpu.worker.EntMTPCPUWorker"
    assert config.scheduler_config.async_scheduling is False


def test_auto_fallback_is_the_longest_lookup_only_tree(tmp_path):
    bank = tmp_path / "bank.json"
    bank.write_text('{"hybrid": [[-1], [0]], "short": [[-1]], "heads": [[0], [0, 0]], "long": [[-1], [-1, -1]]}')
    auto = {"max_batch": 4, "tree": "auto"}
    assert resolve(parse_config({"bank": str(bank), "batch_fallback": auto}), 6).fallback_tree == 3
    # no lookup-only tree: "auto" drafts nothing under load
    assert resolve(parse_config({"bank": "full:2,1,1", "batch_fallback": auto}), 6).fallback_tree is None
