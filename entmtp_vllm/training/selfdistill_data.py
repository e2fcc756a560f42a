"""Self-distillation data: the base model's own greedy answers to training prompts.

Medusa and Hydra recommend training heads on the model's own outputs for chat
models. Answers are generated with vLLM (on CPU: far faster than transformers)
in chunks and appended to a JSONL file, one record per prompt:
`{"id", "prompt_ids", "answer_ids"}`. A restarted run skips the ids already in
the file, so an interrupted job loses at most one chunk.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from entmtp_vllm.errors import EntMTPError
from entmtp_vllm.prompts import Prompt, chat_text


def meta_path(out_file: Path) -> Path:
    """The settings an answers JSONL was generated with sit beside it: `<name>.meta.json`."""
    return out_file.with_name(out_file.name + ".meta.json")


def read_meta(out_file: Path) -> dict:
    """Generation settings of an answers JSONL (`{}` when unknown)."""
    path = meta_path(Path(out_file))
    return json.loads(path.read_text()) if path.is_file() else {}


def write_meta(out_file: Path, settings: dict) -> None:
    """Record `settings` beside `out_file`; refuses a file generated with other settings."""
    known = read_meta(out_file)
    if known and {k: known.get(k) for k in settings} != settings:
        raise EntMTPError(f"{out_file} was generated with other settings ({known}): use another --data file")
    meta_path(out_file).write_text(json.dumps(settings, indent=1) + "\n")


def done_ids(out_file: Path) -> set[str]:
    """Ids already answered in `out_file` (a truncated last line is ignored)."""
    ids: set[str] = set()
    if out_file.exists():
        for line in out_file.read_text().splitlines():
            try:
                ids.add(json.loads(line)["id"])
            except (ValueError, KeyError):
                continue
    return ids


def encode_prompt(tokenizer, text: str, max_prompt_tokens: int) -> list[int]:
    """The prompt ids an answer is generated from: the user message truncated to
    `max_prompt_tokens` tokens (not the template, so every prompt keeps its chat frame), then
    chat-templated and encoded."""
    user_ids = tokenizer(text, add_special_tokens=False)["input_ids"][:max_prompt_tokens]
    return tokenizer(chat_text(tokenizer, tokenizer.decode(user_ids)), add_special_tokens=False)["input_ids"]


def generate_answers(
    model: str,
    prompts: list[Prompt],
    out_file: Path,
    max_prompt_tokens: int = 256,
    max_answer_tokens: int = 256,
    chunk: int = 128,
    dtype: str = "float32",
    max_num_seqs: int = 64,
    log=print,
) -> int:
    """Answer every prompt not yet in `out_file`; return the number of answer tokens written.

    `dtype` should be the one the heads will draft under (the reference engine's τ is measured
    in float32, and float32 is the fast type on CPUs without native bf16). The KV cache is
    sized for `max_num_seqs` full sequences, so vLLM's CPU worker starts on any machine that
    can hold them (its default asks for 92% of the node's memory)."""
    from transformers import AutoTokenizer
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    from entmtp_vllm.kv_cache_size import model_shape

    done = done_ids(out_file)  # read once: the file holds up to a million tokens of answers
    todo = [p for p in prompts if p.id not in done]
    log(f"{len(prompts) - len(todo)} prompts already answered, {len(todo)} to go")
    if not todo:
        return 0
    tokenizer = AutoTokenizer.from_pretrained(model)
    max_model_len = max_prompt_tokens + max_answer_tokens + 8
    shape = model_shape(model, dtype=dtype, max_model_len=max_model_len)
    kv_bytes = (shape.bytes_per_token * max_model_len * max_num_seqs) if shape else 2**31
    llm = LLM(
        model=model, dtype=dtype, enforce_eager=True, max_model_len=max_model_len,
        max_num_seqs=max_num_seqs, kv_cache_memory_bytes=kv_bytes,
    )
    params = SamplingParams(temperature=0.0, max_tokens=max_answer_tokens)
    out_file.parent.mkdir(parents=True, exist_ok=True)
    write_meta(out_file, {"model": str(model), "dtype": dtype, "max_prompt_tokens": max_prompt_tokens,
                          "max_answer_tokens": max_answer_tokens, "generator": "vLLM greedy"})
    written = 0
    started = time.perf_counter()
    for start in range(0, len(todo), chunk):
        batch = todo[start : start + chunk]
        encoded = [encode_prompt(tokenizer, prompt.text, max_prompt_tokens) for prompt in batch]
        outputs = llm.generate([TokensPrompt(prompt_token_ids=ids) for ids in encoded], params, use_tqdm=False)
        with out_file.open("a") as handle:
            for prompt, ids, output in zip(batch, encoded, outputs):
                answer = list(output.outputs[0].token_ids)
                handle.write(json.dumps({"id": prompt.id, "prompt_ids": ids, "answer_ids": answer}) + "\n")
                written += len(answer)
        elapsed = time.perf_counter() - started
        log(f"{start + len(batch)}/{len(todo)} prompts, {written} answer tokens, {written / elapsed:.0f} tok/s")
    return written
