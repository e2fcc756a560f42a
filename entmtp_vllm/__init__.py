"""EntMTP: per-step scheduled tree speculative decoding with Hydra heads (core, engines, vLLM plugin).

Importing this package stays light: `EntMTP` (the vLLM proposer class that
`--speculative-config '{"model": "entmtp_vllm.EntMTP", ...}'` names) is resolved lazily, so
the core never imports vLLM.
"""


def __getattr__(name: str):
    if name == "EntMTP":
        from entmtp_vllm.vllm_plugin.proposer import EntMTPProposer

        return EntMTPProposer
    raise AttributeError(f"module 'entmtp_vllm' has no attribute {name!r}")
