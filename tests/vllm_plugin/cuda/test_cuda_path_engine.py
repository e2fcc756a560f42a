"""The CUDA path end to end in a CPU vLLM engine: vLLM's own Triton attention backend
(`TRITON_ATTN`, EntMTP's `TreeTritonAttentionBackend`), `paged_tree_attention` for the tree rows
and one `compact_kv` launch per step, all Triton under the interpreter (`_triton_interpreter.py`),
in a runner made of the GPU runner's EntMTP parts (`KernelCompaction`, `TreeRunnerMixin`) over
vLLM's CPU runner.

A tiny random-weight Llama (head dim 64, GQA 4/2). The drafter is the oracle test double (a bigram
table of the reference outputs, sibling ranks swapped at random, so accepted paths skip siblings
and compaction moves K/V); a hysteresis policy switches between two branching trees on the last
accepted length. Greedy output must equal the same engine's without speculation (same backend),
and must not with compaction off (negative control). Each engine runs in its own subprocess
(`_triton_engine.py`), so the patches of vLLM stay there.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.vllm, pytest.mark.triton, pytest.mark.slow]

pytest.importorskip("vllm")
pytest.importorskip("entmtp_kernels")

HERE = Path(__file__).resolve().parent
VOCAB, HIDDEN = 512, 256
PROMPTS = [[(7 * i + 3 * j) % (VOCAB - 12) + 3 for j in range(5 + 9 * i)] for i in range(3)]
MAX_TOKENS = 20
TREES = {"small": [[0], [1], [0, 0]], "wide": [[0], [1], [2], [0, 0], [1, 0], [0, 0, 0]]}


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> dict[str, str]:
    """A random Llama with head dim 64 (the kernels' smallest), random heads, a two-tree bank."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from entmtp_vllm.heads import make_heads
    from entmtp_vllm.heads.checkpoint import save_heads

    root = tmp_path_factory.mktemp("tiny_triton")
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=2 * HIDDEN, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=1024, tie_word_embeddings=True,
        bos_token_id=1, eos_token_id=2, pad_token_id=2, initializer_range=0.2,
    )
    LlamaForCausalLM(config).save_pretrained(root / "model")
    save_heads(make_heads("hydra", HIDDEN, VOCAB, num_heads=3), root / "heads", dtype=torch.float32)
    (root / "bank.json").write_text(json.dumps(TREES))
    return {"model": str(root / "model"), "heads": str(root / "heads"), "bank": str(root / "bank.json"),
            "root": str(root)}


def run_engine(tiny: dict[str, str], name: str, entmtp: dict | None = None, oracle=None) -> dict:
    root = Path(tiny["root"])
    job = {"model": tiny["model"], "prompts": PROMPTS, "max_tokens": MAX_TOKENS, "entmtp": entmtp,
           "num_speculative_tokens": max(len(tree) for tree in TREES.values()), "oracle": oracle}
    (root / f"{name}.job.json").write_text(json.dumps(job))
    done = subprocess.run(
        [sys.executable, str(HERE / "_triton_engine.py"), str(root / f"{name}.job.json"), str(root / f"{name}.json")],
        env={**os.environ, "TRITON_INTERPRET": "1", "VLLM_ENABLE_V1_MULTIPROCESSING": "0"},
        capture_output=True, text=True, timeout=1200,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads((root / f"{name}.json").read_text())


@pytest.fixture(scope="module")
def plain(tiny) -> dict:
    return run_engine(tiny, "plain")


def settings(tiny: dict[str, str], **extra) -> dict:
    policy = {"kind": "hysteresis", "conservative": "small", "aggressive": "wide", "tau_on": 1.5, "tau_off": 0.5,
              "feature": "last_accept_length"}
    return {"heads": tiny["heads"], "bank": tiny["bank"], "policy": policy, "budget": None, "batch_fallback": None,
            **extra}


def test_plain_engine_runs_vllms_triton_backend(plain):
    assert plain["backend"] == "TreeTritonAttentionBackend"
    assert plain["kernel_calls"] == {"paged_tree_attention": 0, "compact_kv": 0}
    assert all(len(ids) == MAX_TOKENS for ids in plain["ids"])


def test_tree_path_through_the_cuda_backend_is_greedy_exact(tiny, plain):
    got = run_engine(tiny, "entmtp", settings(tiny), oracle=plain["ids"])
    counters = got["stats"]
    # the worker's warm-up launched every kernel variant before the first request (one pass and
    # split-KV attention for the model's one shape, compaction), and said so
    assert got["warm_up_calls"] == {"paged_tree_attention": 2, "compact_kv": 1}, got["warm_up_calls"]
    for variant in ("tree_attention[fp32,d64,nosoftcap,nosplit]", "tree_attention[fp32,d64,nosoftcap,split]",
                    "combine_splits[fp32,d64]", "compact_kv[words]"):
        assert variant in got["warm_up_line"], got["warm_up_line"]
    assert got["backend"] == "TreeTritonAttentionBackend"
    assert got["ids"] == plain["ids"], counters
    assert got["kernel_calls"]["paged_tree_attention"] > 0 and got["kernel_calls"]["compact_kv"] > 0, got
    assert counters["compaction_moves"] > 0 and counters["accepted_tokens"] > 0, counters
    assert counters["switches"] > 0 and set(counters["tree_usage"]) == set(TREES), counters


def test_without_compaction_the_output_breaks(tiny, plain):
    """Negative control: the same run with compaction off must differ from the reference."""
    got = run_engine(tiny, "no_compaction", settings(tiny, debug_disable_compaction=True), oracle=plain["ids"])
    assert got["kernel_calls"]["compact_kv"] == got["warm_up_calls"]["compact_kv"], got  # none while serving
    assert got["ids"] != plain["ids"]
