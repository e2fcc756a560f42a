"""Greedy token ids of one vLLM engine setup, for the dtype check (`run.sh`, `compare.py`).

One in-process engine (VLLM_ENABLE_V1_MULTIPROCESSING=0), eager, the given dtype, with EntMTP's
default settings or without speculation; the MT-bench test prompts either all at once (one batch
of up to N requests, as under load) or one at a time (concurrency 1). Writes
`<out>/<mode>-<dtype>-<batch>.json`: the token ids of every prompt's output, in prompt order.

    python greedy_outputs.py nospec|entmtp DTYPE all|one OUT_DIR [PROMPTS] [MAX_TOKENS]
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path


def main() -> None:
    mode, dtype, batch, out = sys.argv[1], sys.argv[2], sys.argv[3], Path(sys.argv[4])
    n = int(sys.argv[5]) if len(sys.argv) > 5 else 16
    max_tokens = int(sys.argv[6]) if len(sys.argv) > 6 else 128
    if mode not in ("nospec", "entmtp") or batch not in ("all", "one"):
        sys.exit(__doc__)
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    from transformers import AutoTokenizer
    from vllm import LLM, SamplingParams

    from entmtp_vllm.model_store import resolve_model
    from entmtp_vllm.prompts import chat_text, load_prompts

    model = resolve_model(None)
    tokenizer = AutoTokenizer.from_pretrained(model)
    prompts = [chat_text(tokenizer, p.text) for p in load_prompts("mt_bench", n=n, split="test")]
    kwargs = dict(model=model, dtype=dtype, enforce_eager=True, max_model_len=2048, max_num_seqs=max(16, n),
                  kv_cache_memory_bytes=2 << 30, distributed_executor_backend="uni", seed=0)
    if mode == "entmtp":
        kwargs["speculative_config"] = {"model": "entmtp_vllm.EntMTP", "num_speculative_tokens": 6}
    llm = LLM(**kwargs)
    params = SamplingParams(temperature=0.0, max_tokens=max_tokens)
    started = time.perf_counter()
    if batch == "all":
        outputs = llm.generate(prompts, params, use_tqdm=False)
    else:
        outputs = [llm.generate([prompt], params, use_tqdm=False)[0] for prompt in prompts]
    tokens = [list(o.outputs[0].token_ids) for o in outputs]
    result = {"mode": mode, "dtype": dtype, "batch": batch, "prompts": n, "max_tokens": max_tokens,
              "wall_s": time.perf_counter() - started, "tokens": tokens}
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{mode}-{dtype}-{batch}.json").write_text(json.dumps(result) + "\n")
    print(f"{mode} {dtype} {batch}: {sum(map(len, tokens))} tokens in {result['wall_s']:.1f} s", flush=True)


if __name__ == "__main__":
    main()
