"""`entmtp generate`: a tiny random Llama with the embedded tokenizer (fast); the real SmolLM2 (slow)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from entmtp_vllm.cli.main import main
from entmtp_vllm.config import EMBEDDED_MODEL
from entmtp_vllm.model_store import prepared_model_problem

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja")


def _embedded_or_skip() -> Path:
    folder = EMBEDDED_MODEL.prepared_dir()
    if prepared_model_problem(folder) is not None:
        pytest.skip("the embedded model is not prepared (run `entmtp model prepare`)")
    return folder


def make_tiny_model_folder(root: Path) -> tuple[Path, Path]:
    """(model folder, random Hydra heads folder): a 2-layer random Llama with SmolLM2's vocabulary
    and tokenizer, and 3 randomly perturbed Hydra heads saved for it."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from entmtp_vllm.heads import make_heads
    from entmtp_vllm.heads.checkpoint import save_heads

    embedded = _embedded_or_skip()
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=49152, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=1024, tie_word_embeddings=True, bos_token_id=1,
        eos_token_id=2, pad_token_id=2, initializer_range=0.2,
    )
    model_dir = root / "tiny-llama"
    LlamaForCausalLM(config).save_pretrained(model_dir)
    for name in TOKENIZER_FILES:
        if (embedded / name).is_file():
            shutil.copy(embedded / name, model_dir / name)
    heads = make_heads("hydra", 32, 49152, num_heads=3)
    with torch.no_grad():
        for param in heads.parameters():
            param.add_(torch.randn_like(param) * 0.05)
    heads_dir = save_heads(heads, root / "tiny-heads", {"base_model": "tiny-llama"}, dtype=torch.float32)
    return model_dir, heads_dir


@pytest.fixture(scope="module")
def tiny_folders(tmp_path_factory):
    return make_tiny_model_folder(tmp_path_factory.mktemp("tiny"))


def run_json(capsys, *argv: str) -> dict:
    assert main(["generate", *argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_generate_ar_json(tiny_folders, capsys):
    model_dir, _ = tiny_folders
    out = run_json(capsys, "--prompt", "Hello there", "--model", str(model_dir), "--method", "ar", "--max-tokens", "9")
    for key in ("text", "token_ids", "accept_lengths", "tokens_per_second", "steps", "trees_used"):
        assert key in out
    assert len(out["token_ids"]) <= 9 and out["method"] == "ar"
    assert out["accept_lengths"] == [1] * (len(out["token_ids"]) - 1)


def test_generate_tree_equals_ar_and_plain_output(tiny_folders, capsys):
    model_dir, heads_dir = tiny_folders
    common = ["--prompt", "Write a poem.", "--model", str(model_dir), "--max-tokens", "12"]
    ar = run_json(capsys, *common, "--method", "ar")
    tree = run_json(capsys, *common, "--heads", str(heads_dir), "--tree", "full:2,2,1")
    assert tree["method"] == "tree" and tree["trees_used"] == {"full:2,2,1": len(tree["steps"])}
    assert tree["token_ids"] == ar["token_ids"]
    assert len(tree["accept_lengths"]) == len(tree["steps"])
    # torch's matrix multiply instead of the default (packed where it builds): tree equals AR there
    # too, and each output says which one ran
    torch_ar = run_json(capsys, *common, "--method", "ar", "--cpu-gemm", "torch")
    torch_tree = run_json(capsys, *common, "--heads", str(heads_dir), "--tree", "full:2,2,1", "--cpu-gemm", "torch")
    assert torch_tree["cpu_gemm"] == torch_ar["cpu_gemm"] == "torch" and tree["cpu_gemm"] in ("packed", "torch")
    assert torch_tree["token_ids"] == torch_ar["token_ids"]
    assert main(["generate", *common, "--heads", str(heads_dir), "--tree", "chain:2"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert "tok/s" in lines[-1] and "mean accept length" in lines[-1]


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--tree", "chain:5"], "depth 5 but the heads draft only 3"),
        (["--tree", "oak:3"], "not a generated shape"),
        (["--method", "ar", "--tree", "chain:2"], "takes no --tree"),
        (["--heads", "/nonexistent/heads"], "no hydra heads at /nonexistent/heads"),
        (["--max-tokens", "0"], "at least 1"),
        (["--max-tokens", "5000"], "context is 1024 tokens"),
        (["--temperature", "-1"], "--temperature"),
    ],
)
def test_generate_user_errors_exit_2(tiny_folders, capsys, extra, message):
    model_dir, heads_dir = tiny_folders
    argv = ["generate", "--prompt", "hi", "--model", str(model_dir)]
    if "--heads" not in extra and "--method" not in extra:
        argv += ["--heads", str(heads_dir)]
    assert main(argv + extra) == 2
    err = capsys.readouterr().err
    assert err.startswith("entmtp: error:") and message in err, err


def test_heads_for_another_model_are_rejected(tiny_folders, tmp_path, capsys):
    from entmtp_vllm.heads import make_heads
    from entmtp_vllm.heads.checkpoint import save_heads

    model_dir, _ = tiny_folders
    wrong = save_heads(make_heads("hydra", 48, 49152, num_heads=2), tmp_path / "wrong")
    assert main(["generate", "--prompt", "hi", "--model", str(model_dir), "--heads", str(wrong), "--tree", "chain:2"]) == 2
    assert "hidden size 48" in capsys.readouterr().err


@pytest.mark.slow
def test_generate_real_model_subprocess():
    """The console script on the embedded SmolLM2: coherent text and every required key."""
    _embedded_or_skip()
    from entmtp_vllm.heads.checkpoint import default_heads_path

    argv = [sys.executable, "-m", "entmtp_vllm.cli.main", "generate", "--prompt", "What is the capital of France?",
            "--max-tokens", "24", "--json"]
    if not default_heads_path("hydra").exists():
        argv += ["--method", "ar"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    for key in ("text", "token_ids", "accept_lengths", "tokens_per_second", "steps", "trees_used"):
        assert key in out
    assert "Paris" in out["text"]
    assert 0 < len(out["token_ids"]) <= 24 and out["tokens_per_second"] > 0
