"""The models people serve on GPUs, as `config.json` shapes (no weights): each is either accepted
by vLLM's config with EntMTP (then the CUDA checks pass and the tree kernels run at its head dim,
soft-cap and head grouping under the Triton interpreter, against the torch reference), or
refused in one line before any model loads.

The configs are the published ones' attention-relevant fields (head counts and sizes, sliding
windows, soft-caps, KV sharing), with the layer count cut to 2 so vLLM's config stays cheap.
"""

from __future__ import annotations

import json
import os

import pytest
import torch

pytestmark = [pytest.mark.vllm, pytest.mark.triton]

pytest.importorskip("vllm")
kernels = pytest.importorskip("entmtp_kernels")

from entmtp_vllm.errors import EntMTPError  # noqa: E402
from entmtp_vllm.vllm_plugin.support import unsupported  # noqa: E402

INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"
COMMON = {"num_hidden_layers": 2, "torch_dtype": "bfloat16", "bos_token_id": 1, "eos_token_id": 2,
          "rms_norm_eps": 1e-5, "hidden_act": "silu", "tie_word_embeddings": False}
MODELS = {
    "Llama-3-8B": {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096,
                   "intermediate_size": 14336, "num_attention_heads": 32, "num_key_value_heads": 8,
                   "vocab_size": 128256, "max_position_embeddings": 8192, "rope_theta": 500000.0},
    "Qwen2.5-7B": {"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": 3584,
                   "intermediate_size": 18944, "num_attention_heads": 28, "num_key_value_heads": 4,
                   "vocab_size": 152064, "max_position_embeddings": 32768, "rope_theta": 1000000.0,
                   "use_sliding_window": False, "sliding_window": 131072, "max_window_layers": 28},
    "Mistral-7B-v0.3": {"architectures": ["MistralForCausalLM"], "model_type": "mistral", "hidden_size": 4096,
                        "intermediate_size": 14336, "num_attention_heads": 32, "num_key_value_heads": 8,
                        "vocab_size": 32768, "max_position_embeddings": 32768, "rope_theta": 1000000.0,
                        "sliding_window": None},
    "Phi-2": {"architectures": ["PhiForCausalLM"], "model_type": "phi", "hidden_size": 2560,
              "intermediate_size": 10240, "num_attention_heads": 32, "num_key_value_heads": 32,
              "vocab_size": 51200, "max_position_embeddings": 2048, "partial_rotary_factor": 0.4,
              "hidden_act": "gelu_new", "layer_norm_eps": 1e-5, "rope_theta": 10000.0},
    "Phi-3-mini-4k": {"architectures": ["Phi3ForCausalLM"], "model_type": "phi3", "hidden_size": 3072,
                      "intermediate_size": 8192, "num_attention_heads": 32, "num_key_value_heads": 32,
                      "vocab_size": 32064, "max_position_embeddings": 4096, "sliding_window": 2047,
                      "original_max_position_embeddings": 4096, "rope_theta": 10000.0},
    "Gemma-2-9B": {"architectures": ["Gemma2ForCausalLM"], "model_type": "gemma2", "hidden_size": 3584,
                   "intermediate_size": 14336, "num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 256,
                   "vocab_size": 256000, "max_position_embeddings": 8192, "sliding_window": 4096,
                   "attn_logit_softcapping": 50.0, "final_logit_softcapping": 30.0, "query_pre_attn_scalar": 256,
                   "hidden_activation": "gelu_pytorch_tanh", "tie_word_embeddings": True},
    "Gemma-3n-E2B (KV shared across layers)": {
        "architectures": ["Gemma3nForCausalLM"], "model_type": "gemma3n_text", "hidden_size": 2048,
        "intermediate_size": 8192, "num_attention_heads": 8, "num_key_value_heads": 2, "head_dim": 256,
        "vocab_size": 262400, "max_position_embeddings": 32768, "sliding_window": 512, "num_hidden_layers": 4,
        "layer_types": ["sliding_attention", "full_attention", "sliding_attention", "full_attention"],
        "num_kv_shared_layers": 2, "hidden_activation": "gelu_pytorch_tanh", "tie_word_embeddings": True},
}
ACCEPTED = {"Llama-3-8B", "Qwen2.5-7B", "Mistral-7B-v0.3", "Phi-2"}
"""The shapes vLLM's config accepts with EntMTP; the others are refused for the words below."""
REFUSED = {"Phi-3-mini-4k": "sliding-window attention", "Gemma-2-9B": "sliding-window attention",
           "Gemma-3n-E2B (KV shared across layers)": "several KV-cache groups"}


def _head_dim(config: dict) -> int:
    return config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"]


@pytest.fixture(scope="module")
def model_dirs(tmp_path_factory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("shapes")
    dirs = {}
    for name, config in MODELS.items():
        folder = root / name.split(" ")[0]
        folder.mkdir()
        (folder / "config.json").write_text(json.dumps({**COMMON, **config}))
        dirs[name] = str(folder)
    return dirs


def _engine_config(folder: str, heads_folder: str):
    from vllm.engine.arg_utils import EngineArgs

    args = EngineArgs(model=folder, skip_tokenizer_init=True, dtype="bfloat16", enforce_eager=True,
                      max_model_len=2048, speculative_config={"method": "entmtp"},
                      additional_config={"entmtp": {"heads": heads_folder}})
    return args.create_engine_config()


def test_every_shape_is_listed_once():
    assert ACCEPTED.isdisjoint(REFUSED) and ACCEPTED | set(REFUSED) == set(MODELS)
    assert {_head_dim(c) for c in MODELS.values()} == {80, 96, 128, 256}


@pytest.mark.parametrize("name", sorted(MODELS))
def test_vllm_accepts_or_refuses_in_one_line(name, model_dirs, heads_folder):
    if name in ACCEPTED:
        config = _engine_config(model_dirs[name], heads_folder)
        assert config.speculative_config.model == "entmtp_vllm.EntMTP"
        assert config.model_config.get_head_size() == _head_dim(MODELS[name])
        assert unsupported(config, "cuda") == []  # bf16, a kernel head size, a kernel head grouping
        return
    with pytest.raises(EntMTPError) as refused:
        _engine_config(model_dirs[name], heads_folder)
    message = str(refused.value)
    assert "\n" not in message and message.startswith("EntMTP cannot serve this engine: ")
    assert REFUSED[name] in message


@pytest.mark.parametrize("name", sorted(MODELS))
def test_the_tree_kernel_runs_at_the_models_attention_shape(name):
    """Head size, query heads per KV head and soft-cap of the model (KV heads cut to 2 to keep
    the interpreter quick), one prefill-free batch of two trees over paged context, fp32."""
    if not INTERPRETED:
        pytest.skip("the Triton kernel runs on CPU only under TRITON_INTERPRET=1")
    config = MODELS[name]
    head_dim, group = _head_dim(config), config["num_attention_heads"] // config["num_key_value_heads"]
    softcap = float(config.get("attn_logit_softcapping") or 0.0)
    gen = torch.Generator().manual_seed(0)
    kv_heads, block, blocks = 2, 16, 12
    key_cache = torch.randn(blocks, block, kv_heads, head_dim, generator=gen)
    value_cache = torch.randn(blocks, block, kv_heads, head_dim, generator=gen)
    sizes, prefixes = [3, 4], [37, 5]
    masks = [torch.tensor([[1, 0, 0], [1, 1, 0], [1, 0, 1]], dtype=torch.bool),
             torch.tensor([[1, 0, 0, 0], [1, 1, 0, 0], [1, 1, 1, 0], [1, 0, 0, 1]], dtype=torch.bool)]
    tables = torch.randperm(blocks, generator=gen)[:8].view(2, 4).int()
    query = torch.randn(sum(sizes), kv_heads * group, head_dim, generator=gen) * 3.0
    inputs = (query, key_cache, value_cache, tables, torch.tensor([0, 3, 7], dtype=torch.int32),
              torch.tensor(prefixes, dtype=torch.int32), kernels.pack_tree_mask(masks), head_dim**-0.5)
    expected = kernels.paged_tree_attention_ref(*inputs, softcap=softcap)
    got = kernels.paged_tree_attention(*inputs, softcap=softcap)
    torch.testing.assert_close(got, expected, atol=2e-5, rtol=2e-5)
