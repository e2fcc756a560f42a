"""`entmtp train-heads`: self-distillation data → teacher cache → Hydra/Medusa heads.

The three stages are cached, so a restarted command redoes nothing: answers
already in the JSONL are not regenerated (`--generate N`; `--restore-answers` brings back the
answers an earlier machine archived with `--archive-answers`), records already in
the teacher cache are not re-encoded, and `--resume` continues training from the
latest checkpoint in the work folder.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from entmtp_vllm.errors import EntMTPError

DEFAULT_DATA = Path("runs/selfdistill/answers.jsonl")


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "train-heads",
        help="train Hydra or Medusa draft heads by self-distillation",
        description="Generate (or read) the base model's own answers, cache its hidden states, train draft heads.",
    )
    p.add_argument("--model", help="base model folder or hub id (default: the embedded SmolLM2-135M-Instruct)")
    p.add_argument("--data", type=Path, default=DEFAULT_DATA,
                   help="self-distillation JSONL {id, prompt_ids, answer_ids}, read, and written by --generate (default: %(default)s)")
    p.add_argument("--generate", type=int, metavar="N",
                   help="first answer N ShareGPT train-split prompts with vLLM into --data (skips ids already answered there)")
    p.add_argument("--gen-dtype", choices=["float32", "bfloat16", "float16"], default="float32",
                   help="dtype vLLM generates the answers in: the one the heads will draft under (default: %(default)s)")
    p.add_argument("--max-answer-tokens", type=int, default=256, help="longest generated answer (default: %(default)s)")
    p.add_argument("--gen-batch", type=int, default=64, help="sequences vLLM generates at once (default: %(default)s)")
    p.add_argument("--gen-chunk", type=int, default=128,
                   help="prompts answered per chunk, each appended to --data when done (an interrupted run loses at "
                   "most one chunk; a chunk several times --gen-batch keeps vLLM's batch full) (default: %(default)s)")
    p.add_argument("--restore-answers", type=Path, metavar="ARCHIVE",
                   help="first add to --data the answers archived in ARCHIVE (--archive-answers) that it lacks, "
                   "their prompts re-encoded from the ShareGPT train split; --generate then resumes after them")
    p.add_argument("--archive-answers", type=Path, metavar="ARCHIVE",
                   help="after generating, write --data's answers without their prompts (ids, answer tokens, "
                   "settings; gzip JSONL) to ARCHIVE, small enough for git")
    p.add_argument("--kind", choices=["hydra", "medusa"], default="hydra",
                   help="hydra: each head also reads the tokens drafted before it (sequential); medusa: every head "
                   "reads only the base model's hidden state (default: %(default)s)")
    p.add_argument("--num-heads", type=int, default=4,
                   help="draft heads, one per tree depth (default: %(default)s)")
    p.add_argument("--num-layers", type=int, default=1,
                   help="residual layers per head (default: %(default)s; the shipped SmolLM2 heads have 4)")
    p.add_argument("--prefix-layer", action="store_true", help="Hydra++: add the prefix decoder layer")
    length = p.add_mutually_exclusive_group()
    length.add_argument("--steps", type=int, help="optimizer steps")
    length.add_argument("--epochs", type=float, default=1.0, help="passes over the cached positions (default: 1)")
    p.add_argument("--batch-size", type=int, default=256, help="positions per step (default: 256)")
    p.add_argument("--lr", type=float, default=1e-3,
                   help="peak learning rate, after the warm-up, decaying along a cosine (default: %(default)s)")
    p.add_argument("--teacher", choices=["topk", "full", "hard"], default="topk",
                   help="what each head learns: topk (soft cross-entropy against the base model's cached top-k), "
                   "full (KL against its whole distribution, recomputed from the cached hidden state) or hard (its "
                   "greedy token only) (default: %(default)s)")
    p.add_argument("--softmax-vocab", type=int, default=8192,
                   help="train-time softmax vocabulary subset; 0 = full vocabulary (default: %(default)s)")
    p.add_argument("--draft-vocab", type=int, default=8192,
                   help="write draft_vocab.json with this many of the training answers' most frequent tokens beside "
                   "the heads (drafting ranks only those); 0 = none, drafting ranks the full vocabulary (default: %(default)s)")
    p.add_argument("--out", type=Path, help="folder for the final heads (heads.safetensors, config.json, MODEL_CARD.md); needed to train")
    p.add_argument("--stop-after", choices=["generate", "cache"],
                   help="stop after this stage (the long stages run as separate jobs, each resumable)")
    p.add_argument("--work-dir", type=Path, help="checkpoints and logs (default: runs/heads/<kind>)")
    p.add_argument("--cache", type=Path, default=Path("runs/heads/teacher_cache"), help="teacher cache folder (default: %(default)s)")
    p.add_argument("--no-cache-update", action="store_true", help="train on the cache as it is, without encoding new records")
    p.add_argument("--cache-dtype", choices=["bfloat16", "float32"], default="bfloat16",
                   help="dtype the teacher cache stores hidden states in (default: %(default)s)")
    p.add_argument("--resume", action="store_true", help="continue from the latest checkpoint in the work folder")
    p.add_argument("--init-heads", type=Path, metavar="FOLDER",
                   help="start from these saved heads (e.g. the shipped ones) instead of fresh weights: same kind, heads, "
                   "layers and prefix layer as this run; step 0 is evaluated, and a checkpoint to --resume from wins")
    p.add_argument("--eval-interval", type=int, default=200,
                   help="steps between held-out evaluations (loss, per-head top-1 / top-5) (default: %(default)s)")
    p.add_argument("--ckpt-interval", type=int, default=200,
                   help="steps between resumable checkpoints in the work folder (default: %(default)s)")
    p.add_argument("--reload-interval", type=int, default=None, help="pick up new cache shards every N steps")
    p.add_argument("--time-budget", type=float, default=None, metavar="SECONDS", help="stop and save after this wall time")
    p.add_argument("--export", choices=["last", "best"], default="last",
                   help="heads written to --out: the last step's, or those of the evaluation with the best mean held-out "
                   "top-1 (kept in WORK_DIR/best.pt during training, scored again whenever the held-out positions change) "
                   "(default: %(default)s)")
    p.add_argument("--weights", choices=["float16", "int8"], default="float16",
                   help="how the exported weights are stored: int8 keeps a float32 scale per output row and is about half "
                   "the size (for a package's size limit); loading turns them back into floats (default: %(default)s)")
    p.add_argument("--threads", type=int, default=2, help="torch threads; 0 = adapt to the machine load (default: 2)")
    p.add_argument("--seed", type=int, default=0,
                   help="seed of the heads' initial weights, the batches and the held-out split (default: %(default)s)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from entmtp_vllm.heads.checkpoint import load_base_embeddings
    from entmtp_vllm.heads.verifier import model_name
    from entmtp_vllm.model_store import resolve_model
    from entmtp_vllm.training.teacher_cache import build_teacher_cache
    from entmtp_vllm.training.train_config import BaseTensors, TrainConfig
    from entmtp_vllm.training.train_heads import train_heads

    for name in ("num_heads", "num_layers", "batch_size", "max_answer_tokens", "gen_batch", "gen_chunk"):
        if getattr(args, name) < 1:
            raise EntMTPError(f"--{name.replace('_', '-')} must be at least 1")
    for name in ("softmax_vocab", "draft_vocab"):
        if getattr(args, name) < 0:
            raise EntMTPError(f"--{name.replace('_', '-')} must be 0 (the full vocabulary) or a token count")
    if args.steps is not None and args.steps < 1:
        raise EntMTPError("--steps must be at least 1")
    if args.prefix_layer and args.kind != "hydra":
        raise EntMTPError("--prefix-layer needs --kind hydra")
    if args.out is None and args.stop_after is None:
        raise EntMTPError("--out is needed to train (or pass --stop-after generate|cache)")
    model = resolve_model(args.model)
    if not Path(model).is_dir():
        raise EntMTPError(f"train-heads needs a local model folder; '{model}' is a hub id: download it first")
    data = args.data
    if args.restore_answers:
        from entmtp_vllm.prompts import load_prompts
        from entmtp_vllm.training.answers_archive import restore_answers

        restore_answers(args.restore_answers, data, model, load_prompts("sharegpt", split="train"),
                        log=lambda m: print(m, flush=True))
    if args.generate:
        from entmtp_vllm.prompts import load_prompts
        from entmtp_vllm.training.selfdistill_data import generate_answers

        prompts = load_prompts("sharegpt", n=args.generate, seed=123, split="train")
        generate_answers(
            model, prompts, data, max_answer_tokens=args.max_answer_tokens, dtype=args.gen_dtype,
            max_num_seqs=args.gen_batch, chunk=args.gen_chunk, log=lambda m: print(m, flush=True),
        )
    if args.archive_answers:
        from entmtp_vllm.training.answers_archive import pack_answers

        print(f"{pack_answers(data, args.archive_answers)} answers archived in {args.archive_answers}", flush=True)
    if args.stop_after == "generate":
        return 0
    if not args.no_cache_update:
        build_teacher_cache(model, data, args.cache, dtype=args.cache_dtype, threads=args.threads,
                            log=lambda m: print(m, flush=True))
    if args.stop_after == "cache":
        return 0
    embed, lm_head, config = load_base_embeddings(model)
    base = BaseTensors(embed, lm_head, model_name(model), config)
    cfg = TrainConfig(
        cache=args.cache, data=data, work_dir=args.work_dir or Path("runs/heads") / args.kind, out=args.out, kind=args.kind,
        num_heads=args.num_heads, num_layers=args.num_layers, prefix_layer=args.prefix_layer, steps=args.steps,
        epochs=args.epochs, batch_size=args.batch_size, lr=args.lr, teacher=args.teacher,
        softmax_vocab=args.softmax_vocab or None, draft_vocab=args.draft_vocab or None, eval_interval=args.eval_interval, ckpt_interval=args.ckpt_interval,
        reload_interval=args.reload_interval, time_budget_s=args.time_budget, threads=args.threads, seed=args.seed,
        resume=args.resume, init_heads=args.init_heads, export=args.export, weights=args.weights,
    )
    result = train_heads(cfg, base, log=lambda m: print(m, flush=True))
    if result.get("interrupted"):
        print(f"interrupted at step {result['steps']} of {result['planned_steps']}: nothing exported; --resume continues")
        return 128 + 15  # a stopped job, as a shell reports SIGTERM
    print(f"heads written to {args.out}: held-out top-1 {result['val']['top1']}, top-5 {result['val']['top5']}")
    return 0
