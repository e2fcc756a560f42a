"""Train Hydra or Medusa heads on a teacher cache (the base model stays frozen).

Head d at position t sees h_t and the true tokens x_{t+1}..x_{t+d} (teacher
forcing) and learns the base model's distribution of x_{t+d+1}, i.e.
softmax(lm_head(h_{t+d})), read from the cache: by default its top-k (soft
cross-entropy against the renormalised top-k teacher), or the full distribution
recomputed from the cached hidden state (`teacher="full"`, KL), or the greedy
token only (`teacher="hard"`). Student logits use the base model's frozen LM head
(or the heads' own).

Every `ckpt_interval` steps a training checkpoint (heads, optimizer, step, RNG)
goes to `work_dir/checkpoints/`, and so does the step a SIGTERM stops at; `resume=True`
continues from the latest one.
Every `eval_interval` steps a line with the loss and the held-out per-head
top-1/top-5 agreement with the teacher's argmax is appended to
`work_dir/train_log.jsonl`; the heads of the evaluation with the best mean top-1 so far are
kept in `work_dir/best.pt`. At the end `export_heads` writes the heads (the last ones, or with
`export="best"` those of `best.pt`), their draft vocabulary and a MODEL_CARD.md to `out`.
"""

from __future__ import annotations

import json
import math
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from entmtp_vllm.errors import EntMTPError
from entmtp_vllm.heads import DraftHeads, PrefixLayerConfig, make_heads
from entmtp_vllm.training.best_heads import best_heads_state, eval_key, save_best
from entmtp_vllm.training.export_heads import export_heads
from entmtp_vllm.training.init_heads import init_from
from entmtp_vllm.training.stop_on_sigterm import StopOnSigterm
from entmtp_vllm.training.teacher_cache import CacheSplit, cache_summary, load_cache_split, read_manifest
from entmtp_vllm.training.train_config import BaseTensors, TrainConfig


def _set_threads(threads: int) -> int:
    if threads <= 0:
        import os

        threads = 2 if os.getloadavg()[0] < 2.5 else 1
    if torch.get_num_threads() != threads:
        torch.set_num_threads(threads)
    return threads


def _latest_checkpoint(work_dir: Path) -> Path | None:
    found = sorted((work_dir / "checkpoints").glob("step_*.pt"))
    return found[-1] if found else None


def _lr_at(step: int, cfg: TrainConfig, total: int, time_fraction: float = 0.0) -> float:
    """Warmup, then cosine over the run; with a time budget, progress is the larger of the
    step fraction and the time fraction, so the schedule ends when the budget does."""
    if step < cfg.warmup:
        return cfg.lr * (step + 1) / cfg.warmup
    progress = min(1.0, max((step - cfg.warmup) / max(1, total - cfg.warmup), time_fraction))
    return cfg.lr * (cfg.min_lr_ratio + (1 - cfg.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress)))


def _record_start(split: CacheSplit) -> torch.Tensor:
    ends = split.record_end
    starts = torch.zeros_like(ends)
    change = torch.nonzero(ends[1:] != ends[:-1]).flatten() + 1
    starts[change] = change
    return torch.cummax(starts, 0).values


def _usable_rows(split: CacheSplit) -> torch.Tensor:
    """Positions with at least head 1's target inside their record."""
    return torch.nonzero(torch.arange(split.rows) + 1 < split.record_end).flatten()


def _train_rows(train: CacheSplit, cfg: TrainConfig) -> torch.Tensor:
    """The positions training samples from (at most `max_train_rows`)."""
    rows = _usable_rows(train)
    return rows if cfg.max_train_rows is None else rows[: cfg.max_train_rows]


def _eval_rows(val: CacheSplit, cfg: TrainConfig) -> torch.Tensor:
    """The held-out positions every evaluation uses: `eval_positions` of them, drawn with a
    fixed seed, sorted."""
    rows = _usable_rows(val)
    gen = torch.Generator().manual_seed(1234)
    return rows[torch.randperm(rows.numel(), generator=gen)[: cfg.eval_positions]].sort().values


def _rescored_best(best: dict | None, work: Path, cfg: TrainConfig, base: BaseTensors, val: CacheSplit,
                   rows: torch.Tensor, key: str, log) -> dict | None:
    """The kept best, scored on the current held-out positions (`key`): a best scored on another
    set is evaluated again from `best.pt`, so later evaluations compare with it fairly."""
    state = None if best is None or best.get("eval_key") == key else best_heads_state(work)
    if state is None:
        return best
    heads = build_heads_for(cfg, base)
    heads.load_state_dict(state)
    scored = evaluate(heads, val, base, rows)
    rescored = {"step": best["step"], "mean_top1": sum(scored["top1"]) / len(scored["top1"]), "val": scored, "eval_key": key}
    log(f"held-out set changed: the best heads (step {best['step']}) scored again, mean top-1 "
        f"{best['mean_top1']:.4f} -> {rescored['mean_top1']:.4f}")
    save_best(work, heads.state_dict(), rescored)
    return rescored


def _gather_batch(split: CacheSplit, rows: torch.Tensor, base: BaseTensors, num_heads: int):
    """Inputs and targets for positions `rows` (long [...]): hidden [..., H], path embeddings
    [..., K, H], target rows [..., K] and their validity [..., K]."""
    ends = split.record_end[rows]
    offsets = torch.arange(num_heads + 1)
    all_rows = rows[..., None] + offsets  # j .. j+K
    valid = all_rows < ends[..., None]
    all_rows = torch.minimum(all_rows, ends[..., None] - 1)
    hidden = split.hidden[rows].float()
    path = base.embed[split.tokens[all_rows[..., :num_heads]]]
    return hidden, path, all_rows[..., 1:], valid[..., 1:]


def _condition(heads: DraftHeads, hidden: torch.Tensor, valid_row: torch.Tensor | None = None) -> torch.Tensor:
    """Apply the prefix layer (if any) over windows [B, W, H]."""
    if heads.prefix is None:
        return hidden
    positions = torch.arange(hidden.shape[-2]).expand(hidden.shape[0], -1)
    return heads.prefix(hidden, positions, key_padding=None if valid_row is None else ~valid_row)


def _subset_weights(heads: DraftHeads, d: int, base: BaseTensors, ids: torch.Tensor):
    if heads.lm_heads is not None:
        lin = heads.lm_heads[d - 1]
        return lin.weight[ids], (None if lin.bias is None else lin.bias[ids])
    return base.lm_head[ids], None


def _head_losses(heads, cfg, split, base, hidden, path, targets, valid, frequent=None):
    outs = heads(hidden, path)
    ids = None
    if frequent is not None and cfg.teacher != "full":
        rows = targets[valid]
        extra = split.tokens[rows] if cfg.teacher == "hard" else split.topk_ids[rows].flatten()
        ids = torch.unique(torch.cat([frequent, extra]))  # sorted
    losses = []
    for d in range(1, heads.num_heads + 1):
        mask = valid[..., d - 1]
        if not mask.any():
            losses.append(torch.zeros((), requires_grad=True))
            continue
        h = outs[d - 1][mask]
        rows = targets[..., d - 1][mask]
        if ids is not None:
            weight, bias = _subset_weights(heads, d, base, ids)
            logits = h @ weight.T
            if bias is not None:
                logits = logits + bias
            logq = torch.log_softmax(logits.float(), dim=-1)
            if cfg.teacher == "topk":
                p = torch.softmax(split.topk_logp[rows], dim=-1)
                where = torch.searchsorted(ids, split.topk_ids[rows])
                loss = -(p * logq.gather(1, where)).sum(-1).mean()
            else:
                loss = F.nll_loss(logq, torch.searchsorted(ids, split.tokens[rows]))
            losses.append(loss)
            continue
        logits = heads.project(d, h, base.lm_head).float()
        logq = torch.log_softmax(logits, dim=-1)
        if cfg.teacher == "topk":
            p = torch.softmax(split.topk_logp[rows], dim=-1)
            loss = -(p * logq.gather(1, split.topk_ids[rows])).sum(-1).mean()
        elif cfg.teacher == "full":
            with torch.no_grad():
                logp = torch.log_softmax(split.hidden[rows].float() @ base.lm_head.T, dim=-1)
            loss = (logp.exp() * (logp - logq)).sum(-1).mean()
        else:
            loss = F.nll_loss(logq, split.tokens[rows])
        losses.append(loss)
    return losses


@torch.no_grad()
def evaluate(heads: DraftHeads, split: CacheSplit, base: BaseTensors, rows: torch.Tensor, chunk: int = 512) -> dict:
    """Per-head top-1 / top-5 agreement with the teacher's argmax (teacher-forced path)."""
    heads.eval()
    k = heads.num_heads
    hits1, hits5, counts, nll = torch.zeros(k), torch.zeros(k), torch.zeros(k), torch.zeros(k)
    record_starts = _record_start(split) if heads.prefix is not None else None
    for start in range(0, rows.numel(), chunk):
        r = rows[start : start + chunk]
        if heads.prefix is not None:
            # windows ending at each row: context from up to window - 1 earlier rows of the record
            starts = record_starts[r]
            w = heads.prefix.config.window or 64
            win = r[:, None] + torch.arange(-w + 1, 1)
            ok = win >= starts[:, None]
            win = torch.maximum(win, starts[:, None])
            h = _condition(heads, split.hidden[win].float(), ok)[:, -1]
        else:
            h = split.hidden[r].float()
        _, path, targets, valid = _gather_batch(split, r, base, k)
        outs = heads(h, path)
        for d in range(1, k + 1):
            m = valid[:, d - 1]
            if not m.any():
                continue
            logits = heads.project(d, outs[d - 1][m], base.lm_head).float()
            teacher = split.topk_ids[targets[:, d - 1][m], 0]
            top5 = logits.topk(5, dim=-1).indices
            hits1[d - 1] += (top5[:, 0] == teacher).sum()
            hits5[d - 1] += (top5 == teacher[:, None]).any(-1).sum()
            nll[d - 1] += F.cross_entropy(logits, split.tokens[targets[:, d - 1][m]], reduction="sum")
            counts[d - 1] += m.sum()
    heads.train()
    counts = counts.clamp(min=1)
    return {
        "top1": [round(float(x), 4) for x in hits1 / counts],
        "top5": [round(float(x), 4) for x in hits5 / counts],
        "nll": [round(float(x), 4) for x in nll / counts],
        "positions": int(rows.numel()),
    }


def build_heads_for(cfg: TrainConfig, base: BaseTensors) -> DraftHeads:
    hidden, vocab = base.embed.shape[1], base.embed.shape[0]
    prefix = None
    if cfg.prefix_layer:  # trained on answer rows through a sliding window: it reads the same when drafting
        prefix = PrefixLayerConfig.from_base_config(base.config).model_copy(update={"window": cfg.window, "context": "answer"})
    if prefix is not None and cfg.kind != "hydra":
        raise EntMTPError("--prefix-layer needs --kind hydra")
    kwargs = {"prefix_layer": prefix} if cfg.kind == "hydra" else {}
    return make_heads(cfg.kind, hidden, vocab, num_heads=cfg.num_heads, num_layers=cfg.num_layers, **kwargs)


def train_heads(cfg: TrainConfig, base: BaseTensors, log=print) -> dict:
    """Run (or resume) training; return a summary (steps, wall time, last eval, ...)."""
    _set_threads(cfg.threads)
    torch.manual_seed(cfg.seed)
    work = Path(cfg.work_dir)
    (work / "checkpoints").mkdir(parents=True, exist_ok=True)
    train = load_cache_split(cfg.cache, "train")
    val = load_cache_split(cfg.cache, "val")
    manifest = read_manifest(cfg.cache)
    if manifest["hidden_size"] != base.embed.shape[1] or manifest["vocab_size"] != base.embed.shape[0]:
        raise EntMTPError(f"teacher cache {cfg.cache} was built for another model ({manifest['model']})")
    k = cfg.num_heads
    train_rows, val_rows = _train_rows(train, cfg), _eval_rows(val, cfg)
    if train_rows.numel() == 0:
        raise EntMTPError(f"teacher cache {cfg.cache} has no usable training positions")
    total = cfg.steps or max(1, int(cfg.epochs * train_rows.numel() / cfg.batch_size))
    heads = build_heads_for(cfg, base)
    params = [p for p in heads.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay)
    step, elapsed_before, history, best = 0, 0.0, [], None
    if cfg.resume:
        latest = _latest_checkpoint(work)
        if latest is not None:
            state = torch.load(latest, map_location="cpu", weights_only=False)
            heads.load_state_dict(state["heads"])
            opt.load_state_dict(state["opt"])
            step = state["step"]
            elapsed_before = state.get("elapsed", 0.0)
            best = state.get("best")
            torch.set_rng_state(state["rng"])
            log(f"resumed from {latest} at step {step}")
        else:
            log("no checkpoint to resume from: starting fresh")
    held_out = eval_key(val, val_rows)
    best = _rescored_best(best, work, cfg, base, val, val_rows, held_out, log)
    log_path = work / "train_log.jsonl"
    if cfg.init_heads is not None and step == 0:  # step 0 is the saved heads' own score, and the first best
        init_from(heads, cfg.init_heads, cfg.kind, cfg.num_layers, base.config, log)
        start = evaluate(heads, val, base, val_rows)
        log(f"step 0 (the heads of {cfg.init_heads}): val top1 {start['top1']} top5 {start['top5']}")
        history.append({"step": 0, "val": start, "init_heads": str(cfg.init_heads)})
        with log_path.open("a") as handle:
            handle.write(json.dumps(history[-1]) + "\n")
        best = {"step": 0, "mean_top1": sum(start["top1"]) / len(start["top1"]), "val": start, "eval_key": held_out}
        save_best(work, heads.state_dict(), best)
    summary = cache_summary(cfg.cache)
    known_shards = len(manifest["shards"])
    initial_records, initial_rows = train.num_records, train.rows
    log(f"training {cfg.kind} heads ({k} heads, {cfg.num_layers} layers{', prefix layer' if heads.prefix is not None else ''}) "
        f"on {train.num_records} records / {train_rows.numel()} positions; held out {val.num_records} records / "
        f"{val_rows.numel()} eval positions; {total} steps of {cfg.batch_size}")
    started = time.perf_counter()
    heads.train()
    window = cfg.window if heads.prefix is not None else 1
    record_start = _record_start(train) if heads.prefix is not None else None
    frequent = None
    if cfg.softmax_vocab:
        counts = torch.bincount(train.topk_ids[:, :8].flatten(), minlength=base.embed.shape[0])
        frequent = counts.argsort(descending=True)[: cfg.softmax_vocab].sort().values

    def save_checkpoint() -> None:
        path = work / "checkpoints" / f"step_{step:07d}.pt"
        torch.save({"heads": heads.state_dict(), "opt": opt.state_dict(), "step": step, "rng": torch.get_rng_state(),
                    "elapsed": elapsed_before + time.perf_counter() - started, "config": cfg.model_dump(mode="json"),
                    "best": best}, path.with_suffix(".tmp"))
        path.with_suffix(".tmp").rename(path)
        for old in sorted((work / "checkpoints").glob("step_*.pt"))[: -cfg.keep_checkpoints]:
            old.unlink()

    bar = None
    if cfg.progress:
        from tqdm import tqdm

        bar = tqdm(total=total, initial=step, desc=f"{cfg.kind} heads", file=sys.stderr, mininterval=30, dynamic_ncols=False, ncols=100)
    running = None
    last_eval = None
    stopped_early = False
    with StopOnSigterm() as interrupt:
        while step < total:
            if interrupt.signal is not None:
                log(f"stopped by signal {interrupt.signal} at step {step}/{total}: saving a checkpoint (--resume continues)")
                break
            time_fraction = 0.0
            if cfg.time_budget_s is not None:
                time_fraction = (elapsed_before + time.perf_counter() - started) / cfg.time_budget_s
                if time_fraction >= 1.0:
                    stopped_early = True
                    log(f"time budget reached at step {step}/{total}")
                    break
            for group in opt.param_groups:
                group["lr"] = _lr_at(step, cfg, total, time_fraction)
            n = max(1, cfg.batch_size // window)
            pick = train_rows[torch.randint(train_rows.numel(), (n,))]
            if window > 1:
                # `window - 1` context rows (cut at the record's start), then `window` trained rows
                rows = pick[:, None] + torch.arange(-(window - 1), window)
                starts = record_start[pick][:, None]
                ok = (rows >= starts) & (rows < train.record_end[pick][:, None])
                rows = torch.minimum(torch.maximum(rows, starts), train.record_end[pick][:, None] - 1)
                hidden, path, targets, valid = _gather_batch(train, rows, base, k)
                hidden = _condition(heads, hidden, ok)
                valid = valid & ok[..., None]
                hidden, path, targets, valid = (t[:, window - 1 :] for t in (hidden, path, targets, valid))
            else:
                hidden, path, targets, valid = _gather_batch(train, pick, base, k)
            losses = _head_losses(heads, cfg, train, base, hidden, path, targets, valid, frequent)
            loss = sum(cfg.head_weight_decay ** i * l for i, l in enumerate(losses))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            if cfg.grad_clip:
                torch.nn.utils.clip_grad_norm_(params, cfg.grad_clip)
            opt.step()
            step += 1
            value = float(loss.detach())
            running = value if running is None else 0.98 * running + 0.02 * value
            if bar is not None:
                bar.update(1)
                bar.set_postfix(loss=f"{running:.3f}", refresh=False)
            if step % cfg.eval_interval == 0 or step == total:
                last_eval = evaluate(heads, val, base, val_rows)
                record = {"step": step, "loss": round(value, 4), "loss_ema": round(running, 4),
                          "head_loss": [round(float(l.detach()), 4) for l in losses], "lr": opt.param_groups[0]["lr"],
                          "elapsed_s": round(elapsed_before + time.perf_counter() - started, 1), "val": last_eval}
                record["threads"] = torch.get_num_threads()
                history.append(record)
                with log_path.open("a") as handle:
                    handle.write(json.dumps(record) + "\n")
                _set_threads(cfg.threads)
                log(f"step {step}/{total} loss {running:.3f} val top1 {last_eval['top1']} top5 {last_eval['top5']}")
                mean_top1 = sum(last_eval["top1"]) / len(last_eval["top1"])
                if best is None or mean_top1 > best["mean_top1"]:
                    best = {"step": step, "mean_top1": mean_top1, "val": last_eval, "eval_key": held_out}
                    save_best(work, heads.state_dict(), best)
            if step % cfg.ckpt_interval == 0:
                save_checkpoint()
            if cfg.reload_interval and step % cfg.reload_interval == 0 and step < total:
                shards = len(read_manifest(cfg.cache)["shards"])
                if shards != known_shards:
                    known_shards = shards
                    train = load_cache_split(cfg.cache, "train")
                    record_start = _record_start(train) if heads.prefix is not None else None
                    val = load_cache_split(cfg.cache, "val")
                    train_rows, val_rows = _train_rows(train, cfg), _eval_rows(val, cfg)
                    log(f"step {step}: cache grew to {train.num_records} training records / {train_rows.numel()} positions")
                    held_out = eval_key(val, val_rows)
                    best = _rescored_best(best, work, cfg, base, val, val_rows, held_out, log)
    if bar is not None:
        bar.close()
    save_checkpoint()
    if interrupt.signal is not None:  # an unfinished run: no export, the checkpoint resumes it
        return {"kind": cfg.kind, "steps": step, "planned_steps": total, "interrupted": True}
    if last_eval is None or (history and history[-1]["step"] != step):
        last_eval = evaluate(heads, val, base, val_rows)
    wall = elapsed_before + time.perf_counter() - started
    exported = {"heads": "last", "step": step}
    if cfg.export == "best" and best is not None and best["step"] != step:
        heads.load_state_dict(best_heads_state(work))
        last_eval, exported = best["val"], {"heads": "best", "step": best["step"]}
        log(f"exporting the heads of step {best['step']} (best mean held-out top-1 {best['mean_top1']:.4f})")
    result = {
        "kind": cfg.kind, "steps": step, "planned_steps": total, "stopped_early": stopped_early, "exported": exported,
        "best": None if best is None else {"step": best["step"], "mean_top1": round(best["mean_top1"], 4)},
        "batch_size": cfg.batch_size, "wall_time_s": round(wall, 1), "val": last_eval,
        "data": {"train_records": train.num_records, "train_answer_tokens": train.rows,
                 "initial_train_records": initial_records, "initial_train_answer_tokens": initial_rows,
                 "val_records": val.num_records, "val_answer_tokens": val.rows},
        "config": cfg.model_dump(mode="json"),
    }
    (work / "result.json").write_text(json.dumps(result, indent=2) + "\n")
    if cfg.out is not None:
        export_heads(heads, cfg, base, result, summary, train.tokens)
    return result
