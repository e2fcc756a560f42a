"""Offline acceptance estimate of trained heads on held-out cached answers.

At a held-out position t (cache row j) the drafter starts from the cached base
hidden state h_t and the root token x_{t+1} = tokens[j], drafts a tree, and the
greedy verifier would accept the longest tree path that spells the model's own
greedy continuation tokens[j+1], tokens[j+2], ... (the cached answers are the
model's greedy output). The accept length (tokens emitted per step, τ) is that
depth + 1 (the bonus token). This needs no base-model forward, only the cache;
it is the teacher-forced estimate (no drift, ~1% vLLM/transformers mismatch).
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import torch

from entmtp_vllm.heads.drafting import TreeDrafter
from entmtp_vllm.training.teacher_cache import CacheSplit


def accept_length(drafter: TreeDrafter, split: CacheSplit, buffers, j: int) -> int:
    """Tokens one greedy step starting at cache row `j` emits: accepted drafts + the bonus token."""
    end = int(split.record_end[j])
    tokens = drafter.begin(split.hidden[j].float(), int(split.tokens[j])).draft(buffers).tokens.tolist()
    node, depth = 0, 0
    while depth < buffers.depth and j + depth + 1 < end:
        want = int(split.tokens[j + depth + 1])
        nxt = next((c for c in buffers.children[node] if tokens[c] == want), None)
        if nxt is None:
            break
        node, depth = nxt, depth + 1
    return depth + 1


@torch.no_grad()
def greedy_accept_lengths(drafter: TreeDrafter, split: CacheSplit, buffers, rows: torch.Tensor) -> torch.Tensor:
    """τ at each cache row in `rows` (float tensor): the per-position estimate."""
    return torch.tensor([accept_length(drafter, split, buffers, j) for j in rows.tolist()], dtype=torch.float32)


def record_starts(split: CacheSplit) -> list[int]:
    """First cache row of every record of a split."""
    ends = torch.unique_consecutive(split.record_end).tolist()
    return [0] + ends[:-1]


@torch.no_grad()
def walk_accept_length(drafter: TreeDrafter, split: CacheSplit, buffers, starts: list[int]) -> tuple[int, int]:
    """(tokens, steps) of greedy decoding replayed over whole records, after the prefill.

    From each record's first row, a step's accept length moves to the row the next step starts
    from, as the engine does. tokens / steps is then the engine's τ on those answers (the
    answers are the model's own greedy output), whereas the mean over uniformly drawn positions
    (`greedy_accept_lengths`) weights every position once: the two differ whenever acceptance
    varies along an answer, and the per-position mean is the higher one when long accepted runs
    cluster (a loop the model repeats is one step for the engine but many positions here)."""
    tokens = steps = 0
    for start in starts:
        end, j = int(split.record_end[start]), start
        while j + 1 < end:  # a step emits tokens after row j's root (the prefill emitted the first)
            j += accept_length(drafter, split, buffers, j)
            steps += 1
        tokens += end - 1 - start
    return tokens, steps


SECTION = "## Held-out accept length"


def write_accept_section(card: Path, results: dict) -> None:
    """Add (or replace) the accept-length section of a heads folder's MODEL_CARD.md."""
    text = card.read_text() if card.is_file() else ""
    text = text.split(SECTION)[0].rstrip() + "\n\n"
    rows = "\n".join(
        f"| {name} | {r['nodes']} | {r['accept_length']:.3f} | {r['walk_accept_length']:.3f} |"
        for name, r in results.items() if isinstance(r, dict)
    )
    text += f"""{SECTION}
Greedy verification against the model's own greedy continuation (`python -m entmtp_vllm.training.evaluate_heads`),
from the cached hidden states; τ = tokens emitted per step (accepted draft tokens + the bonus token).
- *positions*: the mean over {results['positions']} random held-out positions, each drafted from the true prefix;
- *replayed*: {results['records']} held-out answers decoded whole, each step starting where the previous one's
  accepted path ended, tokens / steps — what an engine measures. The two differ when acceptance varies
  along an answer: a run of easy positions (a loop the model repeats) is one step for the engine but many
  positions for the mean.

| tree | nodes (incl. root) | τ positions | τ replayed |
|---|---|---|---|
{rows}
"""
    card.write_text(text)


def main(argv: list[str] | None = None) -> None:
    import argparse

    from entmtp_vllm.heads.checkpoint import load_base_embeddings, load_heads
    from entmtp_vllm.heads.draft_vocab import load_draft_vocab
    from entmtp_vllm.model_store import resolve_model
    from entmtp_vllm.topology import build_tree_buffers
    from entmtp_vllm.tree import Tree
    from entmtp_vllm.training.teacher_cache import load_cache_split

    parser = argparse.ArgumentParser(description="held-out greedy accept length of trained heads")
    parser.add_argument("heads", type=Path)
    parser.add_argument("--cache", type=Path, default=Path("runs/heads/teacher_cache"))
    parser.add_argument("--trees", type=Path, default=Path(__file__).resolve().parents[3] / "shared/data/trees/medusa_hydra_trees.json")
    parser.add_argument("--positions", type=int, default=1000)
    parser.add_argument("--records", type=int, default=40, help="held-out records replayed whole (the engine's τ)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--full-vocab", action="store_true",
                        help="rank the full vocabulary, not the heads folder's draft vocabulary (which the engines use)")
    parser.add_argument("--json", type=Path, help="write the results here")
    parser.add_argument("--card", action="store_true", help="add the results to the heads folder's MODEL_CARD.md")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    embed, lm_head, config = load_base_embeddings(resolve_model(None))
    heads = load_heads(args.heads, config)
    vocab = None if args.full_vocab or heads.own_lm_head else load_draft_vocab(args.heads, heads.vocab_size)
    drafter = TreeDrafter(heads, embed.float(), lm_head.float(), draft_vocab=vocab)
    val = load_cache_split(args.cache, "val")
    usable = torch.nonzero(torch.arange(val.rows) + 1 < val.record_end).flatten()
    rows = usable[torch.randperm(usable.numel(), generator=torch.Generator().manual_seed(7))[: args.positions]].sort().values
    trees = {"chain:4": Tree.from_spec("chain:4"), "full:2^3": Tree.from_spec("full:2^3")}
    if args.trees.is_file():
        trees["mc_sim_7b_63"] = Tree.from_choices(json.loads(args.trees.read_text())["trees"]["mc_sim_7b_63"])
    starts = record_starts(val)
    starts = sorted(random.Random(7).sample(starts, min(args.records, len(starts))))
    results = {}
    for name, tree in trees.items():
        buffers = build_tree_buffers(tree)
        tau = greedy_accept_lengths(drafter, val, buffers, rows)
        tokens, steps = walk_accept_length(drafter, val, buffers, starts)
        results[name] = {"nodes": tree.num_nodes, "accept_length": round(float(tau.mean()), 3),
                         "walk_accept_length": round(tokens / steps, 3)}
        print(name, results[name], flush=True)
    results["positions"] = int(rows.numel())
    results["records"] = len(starts)
    results["draft_vocab"] = None if vocab is None else int(vocab.numel())
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    if args.card:
        write_accept_section(args.heads / "MODEL_CARD.md", results)


if __name__ == "__main__":
    main()
