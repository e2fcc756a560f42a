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
from pathlib import Path

import torch

from entmtp_vllm.heads.drafting import TreeDrafter
from entmtp_vllm.training.teacher_cache import CacheSplit


@torch.no_grad()
def greedy_accept_lengths(drafter: TreeDrafter, split: CacheSplit, buffers, rows: torch.Tensor) -> torch.Tensor:
    """τ at each cache row in `rows` (float tensor)."""
    out = []
    children = buffers.children
    for j in rows.tolist():
        end = int(split.record_end[j])
        step = drafter.begin(split.hidden[j].float(), int(split.tokens[j]))
        tokens = step.draft(buffers).tokens.tolist()
        node, depth = 0, 0
        while depth < buffers.depth and j + depth + 1 < end:
            want = int(split.tokens[j + depth + 1])
            nxt = next((c for c in children[node] if tokens[c] == want), None)
            if nxt is None:
                break
            node, depth = nxt, depth + 1
        out.append(depth + 1)
    return torch.tensor(out, dtype=torch.float32)


SECTION = "## Held-out accept length"


def write_accept_section(card: Path, results: dict) -> None:
    """Add (or replace) the accept-length section of a heads folder's MODEL_CARD.md."""
    text = card.read_text() if card.is_file() else ""
    text = text.split(SECTION)[0].rstrip() + "\n\n"
    rows = "\n".join(f"| {name} | {r['nodes']} | {r['accept_length']:.3f} |" for name, r in results.items() if isinstance(r, dict))
    text += f"""{SECTION}
Greedy verification against the model's own greedy continuation, teacher-forced from the cached hidden
state at {results['positions']} random held-out positions (`python -m entmtp_vllm.training.evaluate_heads`);
τ = tokens emitted per step (accepted draft tokens + the bonus token).

| tree | nodes (incl. root) | τ |
|---|---|---|
{rows}
"""
    card.write_text(text)


def main(argv: list[str] | None = None) -> None:
    import argparse

    from entmtp_vllm.heads.checkpoint import load_base_embeddings, load_heads
    from entmtp_vllm.model_store import resolve_model
    from entmtp_vllm.topology import build_tree_buffers
    from entmtp_vllm.tree import Tree
    from entmtp_vllm.training.teacher_cache import load_cache_split

    parser = argparse.ArgumentParser(description="held-out greedy accept length of trained heads")
    parser.add_argument("heads", type=Path)
    parser.add_argument("--cache", type=Path, default=Path("runs/heads/teacher_cache"))
    parser.add_argument("--trees", type=Path, default=Path(__file__).resolve().parents[3] / "shared/data/trees/medusa_hydra_trees.json")
    parser.add_argument("--positions", type=int, default=1000)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--json", type=Path, help="write the results here")
    parser.add_argument("--card", action="store_true", help="add the results to the heads folder's MODEL_CARD.md")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    embed, lm_head, config = load_base_embeddings(resolve_model(None))
    heads = load_heads(args.heads, config)
    drafter = TreeDrafter(heads, embed.float(), lm_head.float() if lm_head is not embed else embed.float())
    val = load_cache_split(args.cache, "val")
    usable = torch.nonzero(torch.arange(val.rows) + 1 < val.record_end).flatten()
    rows = usable[torch.randperm(usable.numel(), generator=torch.Generator().manual_seed(7))[: args.positions]].sort().values
    trees = {"chain:4": Tree.from_spec("chain:4"), "full:2^3": Tree.from_spec("full:2^3")}
    if args.trees.is_file():
        trees["mc_sim_7b_63"] = Tree.from_choices(json.loads(args.trees.read_text())["trees"]["mc_sim_7b_63"])
    results = {}
    for name, tree in trees.items():
        tau = greedy_accept_lengths(drafter, val, build_tree_buffers(tree), rows)
        results[name] = {"nodes": tree.num_nodes, "accept_length": round(float(tau.mean()), 3)}
        print(name, results[name], flush=True)
    results["positions"] = int(rows.numel())
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    if args.card:
        write_accept_section(args.heads / "MODEL_CARD.md", results)


if __name__ == "__main__":
    main()
