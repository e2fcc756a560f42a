"""`entmtp serve`'s command line: out-of-range values, and heads recorded for another model, are
one line naming the flag or both models, before anything starts (the command itself:
tests/test_serve_command.py; served: tests/vllm_plugin)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from entmtp_vllm.cli.main import main


@pytest.mark.parametrize(
    "argv, words",
    [
        (["--threads", "0"], "--threads: Input should be greater than or equal to 1 (got 0)"),
        (["--num-speculative-tokens", "0"], "--num-speculative-tokens: Input should be greater than or equal to 1 (got 0)"),
    ],
)
def test_out_of_range_values_are_one_line(argv, words, capsys):
    assert main(["serve", "--dry-run", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"entmtp: error: {words}" and "Traceback" not in err


def _serve(model: Path | str, heads: Path | str) -> subprocess.CompletedProcess:
    """`entmtp serve --dry-run` in a process of its own (the packed kernel left out: nothing to build)."""
    argv = [sys.executable, "-m", "entmtp_vllm.cli.main", "serve", "--model", str(model), "--heads", str(heads),
            "--cpu-gemm", "vllm", "--dry-run"]
    return subprocess.run(argv, capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def tiny_qwen2(tmp_path_factory) -> tuple[Path, Path, Path]:
    """(model A, model B of A's shape with other weights, heads whose verifier record is A's)."""
    import torch

    from _tiny_saved_model import QWEN2_HIDDEN, QWEN2_VOCAB, save_tiny_qwen2
    from entmtp_vllm.heads import HydraHeads
    from entmtp_vllm.heads.checkpoint import save_heads
    from entmtp_vllm.heads.verifier import record_of_folder

    root = tmp_path_factory.mktemp("tiny_qwen2")
    model_a, model_b = save_tiny_qwen2(root / "tiny-qwen2-a", seed=0), save_tiny_qwen2(root / "tiny-qwen2-b", seed=1)
    heads = save_heads(HydraHeads(QWEN2_HIDDEN, QWEN2_VOCAB, num_heads=2), root / "heads-a", dtype=torch.float32,
                       verifier=record_of_folder(model_a))
    return model_a, model_b, heads


def _one_line_error(done: subprocess.CompletedProcess) -> str:
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("entmtp: error: heads ") and "Traceback" not in done.stderr
    return lines[0]


def test_the_shipped_heads_are_refused_for_another_model_in_one_line(tiny_qwen2):
    from entmtp_vllm.heads.checkpoint import default_heads_path

    error = _one_line_error(_serve(tiny_qwen2[0], default_heads_path("hydra")))
    assert "SmolLM2-135M-Instruct (LlamaForCausalLM" in error and "tiny-qwen2-a (Qwen2ForCausalLM" in error


def test_heads_recorded_for_a_model_of_the_same_shape_are_refused_by_their_fingerprint(tiny_qwen2):
    model_a, model_b, heads = tiny_qwen2
    error = _one_line_error(_serve(model_b, heads))
    assert "tiny-qwen2-a (Qwen2ForCausalLM)" in error and "tiny-qwen2-b (Qwen2ForCausalLM)" in error
    assert "fingerprint" in error
    done = _serve(model_a, heads)
    assert done.returncode == 0, done.stderr
    assert "vllm serve" in done.stdout and "heads check" not in done.stdout


def test_the_shipped_heads_pass_with_the_embedded_model():
    from entmtp_vllm.config import EMBEDDED_MODEL
    from entmtp_vllm.heads.checkpoint import default_heads_path
    from entmtp_vllm.model_store import prepared_model_problem

    if prepared_model_problem(EMBEDDED_MODEL.prepared_dir()) is not None:
        pytest.skip("the embedded model is not prepared")
    for kind in ("hydra", "medusa"):
        done = _serve(EMBEDDED_MODEL.prepared_dir(), default_heads_path(kind))
        assert done.returncode == 0, done.stderr
        assert "heads check" not in done.stdout and done.stdout.strip().splitlines()[-1].count("vllm serve") == 1
