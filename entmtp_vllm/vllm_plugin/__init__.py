"""EntMTP as a vLLM plugin: tree speculative decoding with Hydra heads, per-request trees.

Entry point (`vllm.general_plugins`, run in every vLLM process): `register()`. It only
registers overrides; the heavy parts load when an engine asks for them. The platform-free tree
step lives here; what only one platform needs lives in its package, and only the running
platform's package is imported (`platforms.py`):

- `config.py`       `EntMTPConfig`, read from `--additional-config '{"entmtp": {...}}'`
- `proposer.py`     `EntMTPProposer` (= `entmtp_vllm.EntMTP`), vLLM's `custom_class` drafter
- `tree_runner.py`  the tree step (plan, positions, verify, accept, compact, draft), any platform
- `tree_step.py`    `TreeStep`: the per-step object the runner hands every attention layer
- `step_plan.py`, `sampled_rows.py`  the step's plan; the sampled requests' verification
- `worker_base.py`  what both workers share (counters, the placement line)
- `support.py`      what the tree path refuses at start-up, on every platform
- `draft_handoff.py` the step's drafts carried back with its output (no extra round trip)
- `install.py`      what `register()` changes in vLLM; `platforms.py` which package serves which
                    platform; `backends.py` registers a platform's attention backends
- `compat/`         the check of the vLLM classes, methods and attributes the plugin relies on
- `cpu/`            vLLM's CPU platform: worker, runner, `CPU_ATTN` tree backend, rows attention, Ray
- `cuda/`           vLLM's CUDA platform: worker, runner, `FLASH_ATTN` / `TRITON_ATTN` tree
                    backends, the Triton kernels' call sites, their warm-up

Use:

    vllm serve MODEL --speculative-config '{"method": "entmtp"}' \
      --additional-config '{"entmtp": {"bank": "full:2,1,1"}}'

(`--spec-method entmtp` and `--spec-model entmtp` work too; on CPU add `--enforce-eager`.)
"""

from __future__ import annotations


def register() -> None:
    """vLLM general plugin: the forms users type, min_p and logit_bias let through for EntMTP
    engines, the running platform's tree attention backends and worker selection, the config
    checks, the draft handoff."""
    from entmtp_vllm.vllm_plugin import draft_handoff
    from entmtp_vllm.vllm_plugin.install import wrap_engine_args, wrap_platform, wrap_sampling_checks

    wrap_engine_args()
    wrap_sampling_checks()
    wrap_platform()
    draft_handoff.install()
