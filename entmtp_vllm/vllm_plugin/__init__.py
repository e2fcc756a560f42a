"""EntMTP as a vLLM plugin: tree speculative decoding with Hydra heads, per-request trees.

Entry point (`vllm.general_plugins`, run in every vLLM process): `register()`. It only
registers overrides; the heavy parts load when an engine asks for them:

- `config.py`      `EntMTPConfig`, read from `--additional-config '{"entmtp": {...}}'`
- `proposer.py`    `EntMTPProposer` (= `entmtp_vllm.EntMTP`), vLLM's `custom_class` drafter
- `tree_runner.py` the tree step (plan, positions, verify, accept, compact, draft), any platform
- `tree_step.py`   `TreeStep`: the per-step object the runner hands every attention layer
- `model_runner.py` the CPU and GPU model runners (the mixin over vLLM's runners)
- `worker.py`      the CPU and GPU workers that build them
- `attention.py`   `CPU_ATTN` with per-request tree masks
- `gpu_attention.py` `FLASH_ATTN` / `TRITON_ATTN` with per-request tree masks (Triton kernel)
- `gpu.py`         the kernels' call sites on vLLM's CUDA cache layout
- `support.py`     what the tree path refuses at start-up
- `draft_handoff.py` the step's drafts carried back with its output (no extra round trip)
- `install.py`     what `register()` changes in vLLM

Use:

    vllm serve MODEL --speculative-config '{"method": "entmtp", "num_speculative_tokens": 6}' \
      --additional-config '{"entmtp": {"bank": "full:2,1,1"}}'

(on CPU add `--enforce-eager`; the dotted form `{"model": "entmtp_vllm.EntMTP", ...}` also works.)
"""

from __future__ import annotations


def register() -> None:
    """vLLM general plugin: tree attention backends, the `method: entmtp` form, config checks."""
    from entmtp_vllm.vllm_plugin.install import register_attention_backends, wrap_engine_args, wrap_platform

    from entmtp_vllm.cpu_gemm import vllm_gemm
    from entmtp_vllm.vllm_plugin import draft_handoff

    register_attention_backends()
    wrap_engine_args()
    wrap_platform()
    vllm_gemm.install()
    draft_handoff.install()
