"""Calibration data of a tree search: each prompt's greedy trajectory, and what the heads rank on it.

At temperature 0 the reference engine emits exactly the target's greedy output, whatever the
tree (tree decoding is lossless), so every tree's rollout walks the same token sequence
`seq = prompt + g`, where `g` is the greedy AR continuation. Only the *step boundaries*
depend on the tree. A step whose root is `seq[t]` drafts from the base hidden state at `t-1`;
a node `p = (r1, ..., rd)` is accepted when every node on its path carries the token the
verifier picks after its parent. Along an accepted path the verifier reads exactly the
prefix `seq[:t+d]` (a chain in a tree mask is a causal sequence), so its argmax there is
`seq[t+d]`, and the heads at that node ran on the true tokens `seq[t..t+d-1]`. Hence

    p is accepted at t  <=>  r_k = rank of seq[t+k] in head k's top-k on the true path, k = 1..d

and one *oracle rank path* per position (`Trajectory.ranks[i]`, root `seq[P+i]`) decides the
accept length of every tree at that position. `ranks` come from one teacher-forced forward of
the target over `seq` (its hidden states) and one batched call per head: no tree forward at all.
`tree_search.scoring.ForwardScorer` checks this against literal joint-tree verification.

`g` is generated with the reference engine (AR) for `max_tokens + lookahead` tokens, where
`lookahead` is the number of heads, so that drafts of the last steps can still be matched
(the engine's accept lengths are counted before truncation). Generation stops at EOS; drafts
that would match past an EOS are not counted (the engine stops there too).

Cache: `calibration.jsonl` in the run folder: a header line with the settings, then one line
per prompt (written as soon as it is done, so an interrupted calibration resumes).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from entmtp_vllm.errors import EntMTPError

from tree_search.resumable import append_jsonl, read_jsonl, resume_jsonl, rewrite_jsonl

CALIBRATION_FILE = "calibration.jsonl"
CALIBRATION_REFUSAL = (
    "calibration cache {path} was made with other settings ({diff}); use another --out folder or the same settings"
)
"""The error of a calibration cache made with other settings (`resume_jsonl`'s `refusal`)."""
UNRANKED = -1
"""Rank of a true token outside the top-`rank_cap` (or past the end of the trajectory)."""

# Positions per batched head call (rows of [positions, vocabulary] logits).
_RANK_CHUNK = 256


@dataclass(frozen=True)
class PromptIds:
    """One calibration prompt, already templated and tokenised."""

    id: str
    dataset: str
    ids: list[int]


@dataclass
class Trajectory:
    """A prompt, its greedy continuation and the oracle rank path at every root position."""

    id: str
    dataset: str
    prompt_ids: list[int]
    tokens: list[int]
    """Greedy AR continuation: `max_tokens + lookahead` tokens, or fewer when it hit EOS."""
    ranks: list[list[int]]
    """`ranks[i][d-1]`: rank of `tokens[i+d]` in head d's top-k when the root is `tokens[i]`
    and the path so far is the true one; `UNRANKED` if outside the top-`rank_cap` or unknown."""
    stop_reason: str = "length"

    def as_record(self) -> dict[str, Any]:
        return {
            "kind": "trajectory",
            "id": self.id,
            "dataset": self.dataset,
            "prompt_ids": self.prompt_ids,
            "tokens": self.tokens,
            "stop_reason": self.stop_reason,
            "ranks": self.ranks,
        }

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> Trajectory:
        return cls(
            id=record["id"],
            dataset=record["dataset"],
            prompt_ids=list(record["prompt_ids"]),
            tokens=list(record["tokens"]),
            ranks=[list(row) for row in record["ranks"]],
            stop_reason=record.get("stop_reason", "length"),
        )


@dataclass
class Calibration:
    """Everything a scorer needs: trajectories and how the engine would stop on them."""

    trajectories: list[Trajectory]
    max_tokens: int
    """New tokens per prompt (the engine's `max_new_tokens`)."""
    eos_ids: frozenset[int]
    rank_depth: int
    """Depths with ranks (the number of heads)."""
    rank_cap: int
    """Ranks were looked for in the top-`rank_cap` of each head."""
    settings: dict[str, Any] = field(default_factory=dict)

    @property
    def num_prompts(self) -> int:
        return len(self.trajectories)


# --------------------------------------------------------------------------- the rollout walk


def walk(trajectory: Trajectory, max_tokens: int, eos_ids: frozenset[int], accept_at: Callable[[int], int]):
    """The decode steps of one request, teacher-forced on its greedy trajectory.

    Yields `(i, a)` per step: the root is `tokens[i]`, and `a = accept_at(i)` tokens are emitted
    (accepted drafts + bonus). Mirrors `ReferenceEngine.generate`: the prefill emits
    `tokens[0]`; steps run while fewer than `max_tokens` tokens are out and no EOS was emitted.
    """
    tokens = trajectory.tokens
    if not tokens or tokens[0] in eos_ids:
        return
    i, emitted = 0, 1
    while emitted < max_tokens and i < len(tokens):
        a = accept_at(i)
        yield i, a
        new = tokens[i + 1 : i + 1 + a]
        i += a
        emitted += a
        if any(token in eos_ids for token in new):
            return


# --------------------------------------------------------------------------- the oracle ranks


def _draft_vocab_index(drafter, vocab_size: int, device) -> torch.Tensor | None:
    """full-vocabulary id -> row of the drafter's (sliced) LM head, -1 if absent; None if unsliced."""
    vocab = getattr(drafter, "draft_vocab", None)
    if vocab is None:
        return None
    index = torch.full((vocab_size,), -1, dtype=torch.long, device=device)
    index[vocab.to(device)] = torch.arange(vocab.numel(), device=device)
    return index


@torch.inference_mode()
def oracle_ranks(model, drafter, prompt_ids: Sequence[int], tokens: Sequence[int], depth: int, cap: int) -> list[list[int]]:
    """`ranks[i][d-1]` for every root position `i` of `tokens` and depth d = 1..`depth`.

    One teacher-forced forward of `model` over prompt + tokens gives the base hidden states; head
    d then runs once over all positions (batched), on the same inputs `TreeDrafter` would build
    for the true path (the conditioned hidden state at t-1, the embeddings of seq[t..t+d-1]), and
    the rank is the position of seq[t+d] in the logits' top-`cap` (as `DraftStep` ranks children).
    """
    prompt_ids, tokens = list(prompt_ids), list(tokens)
    num_prompt, num_tokens = len(prompt_ids), len(tokens)
    ranks = [[UNRANKED] * depth for _ in range(num_tokens)]
    if num_tokens == 0:
        return ranks
    device = next(model.parameters()).device
    seq = torch.tensor(prompt_ids + tokens, dtype=torch.long, device=device)
    out = model(input_ids=seq[None], output_hidden_states=True, use_cache=False, logits_to_keep=1)
    hidden = out.hidden_states[-1][0]  # [L, H], after the final norm (what the engine feeds the heads)

    heads = drafter.heads
    conditioned = hidden.to(drafter.device, drafter.dtype)
    if getattr(heads, "prefix", None) is not None:  # Hydra++: the prefix layer over every position, causal
        conditioned = heads.prefix(conditioned, torch.arange(len(seq), device=drafter.device))
    conditioned = conditioned[num_prompt - 1 : num_prompt - 1 + num_tokens]  # row i: state at t-1, t = P + i

    embed_seq = seq.to(drafter.embed_weight.device)
    vocab_index = _draft_vocab_index(drafter, heads.vocab_size, drafter.device)
    result = torch.full((num_tokens, depth), UNRANKED, dtype=torch.long)
    for d in range(1, depth + 1):
        count = num_tokens - d  # positions whose depth-d token is known: i + d < len(tokens)
        for start in range(0, max(count, 0), _RANK_CHUNK):
            rows = torch.arange(start, min(count, start + _RANK_CHUNK))
            t = rows + num_prompt  # absolute index of each root
            path = t[:, None] + torch.arange(d)[None]  # [c, d]: seq[t .. t+d-1], root first
            emb = drafter.embed_weight[embed_seq[path.to(embed_seq.device)]].to(drafter.device, drafter.dtype)
            logits = heads.head_logits(d, conditioned[rows.to(drafter.device)], emb, drafter.lm_head_weight).float()
            true = seq[(t + d).to(seq.device)].to(drafter.device)
            if vocab_index is not None:
                true = vocab_index[true]
            top = logits.topk(min(cap, logits.shape[-1]), dim=-1).indices
            hit = top == true[:, None]
            found = hit.any(dim=-1)
            rank = torch.where(found, hit.float().argmax(dim=-1), torch.full_like(true, UNRANKED))
            result[rows, d - 1] = rank.cpu()
    return result.tolist()


# --------------------------------------------------------------------------- building / caching


def greedy_trajectory(model, tokenizer, prompt_ids: Sequence[int], new_tokens: int) -> tuple[list[int], str]:
    """The target's greedy AR continuation, from the reference engine (stops at EOS)."""
    from entmtp_vllm.engine.reference import ReferenceEngine

    gen = ReferenceEngine(model, tokenizer).generate(list(prompt_ids), new_tokens, method="ar")
    return list(gen.token_ids), gen.stop_reason


def build_calibration(
    prompts: Sequence[PromptIds],
    *,
    max_tokens: int,
    rank_depth: int,
    rank_cap: int,
    settings: dict[str, Any],
    load: Callable[[], tuple[Any, Any, Any]],
    path: Path | None = None,
    progress: bool = True,
) -> Calibration:
    """Trajectories and oracle ranks for `prompts`, from the cache at `path` when it has them.

    `load()` returns (model, tokenizer, drafter); it is called only when something must be
    computed. `settings` identify the calibration; a cache written with other settings is an
    `EntMTPError` (a different folder, or the same settings, is needed).
    """
    from tqdm import tqdm

    from entmtp_vllm.engine.reference import eos_token_ids

    done: dict[str, Trajectory] = {}
    eos_cached = None
    if path is not None:
        records, truncated = resume_jsonl(path, "calibration cache", settings, "trajectory", CALIBRATION_REFUSAL)
        done = {r["id"]: Trajectory.from_record(r) for r in records if r.get("kind") == "trajectory"}
        if not done:  # nothing computed yet: start over with these settings (an eos record too)
            rewrite_jsonl(path, settings, [])
        else:
            eos_cached = next((r["eos_ids"] for r in records if r.get("kind") == "eos"), None)
            if truncated:
                rewrite_jsonl(path, settings, records)

    missing = [p for p in prompts if p.id not in done]
    eos_ids = None if eos_cached is None else frozenset(eos_cached)
    if missing or eos_ids is None:
        model, tokenizer, drafter = load()
        if eos_ids is None:
            eos_ids = frozenset(eos_token_ids(model, tokenizer))
            if path is not None:
                append_jsonl(path, {"kind": "eos", "eos_ids": sorted(eos_ids)})
        bar = tqdm(total=len(prompts), initial=len(prompts) - len(missing), desc="calibration (greedy AR + head ranks)",
                   unit="prompt", disable=not progress)
        for prompt in missing:
            tokens, stop = greedy_trajectory(model, tokenizer, prompt.ids, max_tokens + rank_depth)
            ranks = oracle_ranks(model, drafter, prompt.ids, tokens, rank_depth, rank_cap)
            trajectory = Trajectory(prompt.id, prompt.dataset, list(prompt.ids), tokens, ranks, stop)
            done[prompt.id] = trajectory
            if path is not None:
                append_jsonl(path, trajectory.as_record())
            bar.update()
        bar.close()
    return Calibration(
        trajectories=[done[p.id] for p in prompts],
        max_tokens=max_tokens,
        eos_ids=eos_ids,
        rank_depth=rank_depth,
        rank_cap=rank_cap,
        settings=settings,
    )


def load_calibration(path: Path) -> Calibration:
    """A finished calibration cache, as written by `build_calibration` (for `debias`)."""
    settings, records, _ = read_jsonl(path, "calibration cache")
    if settings is None:
        raise EntMTPError(f"no calibration cache at {path}: run `entmtp search frontier` into that folder first")
    trajectories = [Trajectory.from_record(r) for r in records if r.get("kind") == "trajectory"]
    eos = next((r["eos_ids"] for r in records if r.get("kind") == "eos"), [])
    by_id = {t.id: t for t in trajectories}
    order = settings.get("prompt_ids") or list(by_id)
    if any(pid not in by_id for pid in order):
        raise EntMTPError(f"calibration cache {path} is incomplete: rerun `entmtp search frontier` to finish it")
    return Calibration(
        trajectories=[by_id[pid] for pid in order],
        max_tokens=settings["max_tokens"],
        eos_ids=frozenset(eos),
        rank_depth=settings["rank_depth"],
        rank_cap=settings["rank_cap"],
        settings=settings,
    )


# --------------------------------------------------------------------------- literal tree verification


def verify_tree_at(model, cache, cache_len: int, past_len: int, tokens: torch.Tensor, buffers) -> tuple[torch.Tensor, torch.Tensor]:
    """Verify one tree whose root sits at `past_len`, over a cache holding a longer sequence.

    `cache` (a transformers `DynamicCache`) holds `cache_len >= past_len` entries of the
    trajectory; the tree's nodes see only the first `past_len` of them (the prefix) and their
    own ancestors, at positions `past_len + depths`: the reference engine's verification
    (`ReferenceEngine._tree_mask`, a 4-D additive mask) with the extra entries masked out. The
    cache is cut back to `cache_len` afterwards. Returns (logits [N, V], hidden [N, H]).
    """
    device = next(model.parameters()).device
    dtype = next(model.parameters()).dtype
    n = buffers.num_nodes
    blocked = torch.finfo(dtype).min
    mask = torch.full((1, 1, n, cache_len + n), blocked, dtype=dtype, device=device)
    mask[0, 0, :, :past_len] = 0
    mask[0, 0, :, cache_len:].masked_fill_(buffers.attention_mask.to(device), 0)
    out = model(
        input_ids=tokens.to(device)[None],
        position_ids=(past_len + buffers.depths.to(device))[None],
        attention_mask=mask,
        past_key_values=cache,
        use_cache=True,
        output_hidden_states=True,
    )
    for layer in cache.layers:  # drop the tree's entries: the cache holds the trajectory again
        layer.keys = layer.keys[..., :cache_len, :]
        layer.values = layer.values[..., :cache_len, :]
    return out.logits[0], out.hidden_states[-1][0]
