"""`entmtp bench offline` end to end on a tiny random Llama with SmolLM2's tokenizer and random heads."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from entmtp_vllm.cli.main import main
from entmtp_vllm.config import EMBEDDED_MODEL
from entmtp_vllm.model_store import prepared_model_problem


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> tuple[Path, Path, Path]:
    """(model folder, Hydra heads folder, Medusa heads folder)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from entmtp_vllm.heads import make_heads
    from entmtp_vllm.heads.checkpoint import save_heads

    embedded = EMBEDDED_MODEL.prepared_dir()
    if prepared_model_problem(embedded) is not None:
        pytest.skip("the embedded model is not prepared (its tokenizer is reused)")
    root = tmp_path_factory.mktemp("bench")
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=49152, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=2048, tie_word_embeddings=True, bos_token_id=1,
        eos_token_id=2, pad_token_id=2, initializer_range=0.2,
    )
    LlamaForCausalLM(config).save_pretrained(root / "model")
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        if (embedded / name).is_file():
            shutil.copy(embedded / name, root / "model" / name)
    folders = []
    for kind in ("hydra", "medusa"):
        heads = make_heads(kind, 32, 49152, num_heads=3)
        with torch.no_grad():
            for param in heads.parameters():
                param.add_(torch.randn_like(param) * 0.05)
        folders.append(save_heads(heads, root / kind, dtype=torch.float32))
    return root / "model", folders[0], folders[1]


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
    ]
    assert main(argv) == 0, capsys.readouterr().err
    table = capsys.readouterr().out
    assert "| `ar` |" in table and "| `tree:full:2,1` |" in table and "| `medusa:chain:3` |" in table
    assert "equal AR's on every prompt" in table
    results = json.loads((out / "offline.json").read_text())
    assert list(results["methods"]) == ["ar", "tree:full:2,1", f"bank:{bank}", "medusa:chain:3"]
    assert results["num_prompts"] == 4 and results["machine"]["threads"] == 1
    for label, summary in results["methods"].items():
        assert summary["mismatches"] == 0 and len(summary["prompts"]) == 4
        assert summary["tokens_per_second"] > 0 and summary["speedup"] > 0
        assert summary["mean_nodes"] == (1.0 if label == "ar" else summary["mean_nodes"])
    assert results["methods"]["ar"]["speedup"] == 1.0
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
