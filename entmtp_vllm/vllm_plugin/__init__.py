"""EntMTP as a vLLM plugin: tree speculative decoding with Hydra heads, per-request trees.

Entry point (`vllm.general_plugins`, run in every vLLM process): `register()`. It only
registers overrides; the heavy parts load when an engine asks for them:

- `config.py`      `EntMTPConfig`, read from `--additional-config '{"entmtp": {...}}'`
- `proposer.py`    `EntMTPProposer` (= `entmtp_vllm.EntMTP`), vLLM's `custom_class` drafter
- `model_runner.py` tree verification, acceptance and KV compaction in the CPU model runner
- `worker.py`      the CPU worker that builds that runner
- `attention.py`   `CPU_ATTN` with per-request tree masks
- `install.py`     what `register()` changes in vLLM
- `gpu.py`         the GPU kernels' call sites (not wired into a GPU runner yet)

Use (CPU):

    vllm serve MODEL --enforce-eager \
      --speculative-config '{"model": "entmtp_vllm.EntMTP", "num_speculative_tokens": 6}' \
      --additional-config '{"entmtp": {"bank": "full:2,1,1"}}'
"""

from __future__ import annotations


def register() -> None:
    """vLLM general plugin: tree attention backend override + EntMTP config hook."""
    from entmtp_vllm.vllm_plugin.install import register_attention_backend, wrap_cpu_platform

    register_attention_backend()
    wrap_cpu_platform()
