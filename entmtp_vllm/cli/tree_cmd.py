"""`entmtp tree show SPEC`: inspect trees from a spec, a bank file or a choices file."""

from __future__ import annotations

import argparse
import json
from typing import Any

from entmtp_vllm.bank_file import load_tree_source
from entmtp_vllm.topology import TreeBuffers, build_tree_buffers
from entmtp_vllm.tree import LOOKUP, SPEC_FORMS

# Trees up to this many nodes (root included) are drawn in the human output.
MAX_DRAWN_NODES = 64


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "tree",
        help="inspect draft trees",
        description="Draft trees: generated shapes, bank files and Medusa-style choices files.",
    )
    parser.set_defaults(func=lambda args: parser.print_help() or 2)
    sub = parser.add_subparsers(metavar="ACTION")
    show = sub.add_parser(
        "show",
        help="summarise trees and their buffers",
        description="Summarise each tree of SPEC (nodes, depth, leaves, branching) and draw the small "
        "ones; --json prints the buffers that the engines use.",
    )
    show.add_argument(
        "spec",
        metavar="SPEC",
        help=f"a bank file, a choices JSON file, or a generated shape: {SPEC_FORMS}",
    )
    show.add_argument("--name", help="show only the tree with this name")
    show.add_argument("--json", action="store_true", help="print one JSON object instead of a summary")
    show.set_defaults(func=run_show)


def run_show(args: argparse.Namespace) -> int:
    trees = load_tree_source(args.spec, args.name)
    shown = [(name, build_tree_buffers(tree)) for name, tree in trees]
    if args.json:
        if len(shown) == 1:
            print(json.dumps(buffers_json(*shown[0])))
        else:
            print(json.dumps({"trees": {name: buffers_json(name, buffers) for name, buffers in shown}}))
    else:
        print("\n\n".join(summary(name, buffers) for name, buffers in shown))
    return 0


def buffers_json(name: str, buffers: TreeBuffers) -> dict[str, Any]:
    """A tree's buffers as plain JSON values (mask rows as 0/1, retrieve rows padded with -1)."""
    return {
        "name": name,
        "num_nodes": buffers.num_nodes,
        "depth": buffers.depth,
        "topk": buffers.topk,
        "nodes": [list(path) for path in buffers.nodes],
        "parents": buffers.parents.tolist(),
        "depths": buffers.depths.tolist(),
        "ranks": buffers.ranks.tolist(),
        "attention_mask": buffers.attention_mask.int().tolist(),
        "retrieve_indices": buffers.retrieve_indices.tolist(),
        "level_starts": list(buffers.level_starts),
        "children": [list(kids) for kids in buffers.children],
        "medusa_gather": buffers.medusa_gather.tolist(),
        "lookup_nodes": list(buffers.lookup_nodes),
    }


def summary(name: str, buffers: TreeBuffers) -> str:
    """A few lines about one tree, plus a drawing when it is small."""
    starts = buffers.level_starts
    per_depth = [starts[d + 1] - starts[d] for d in range(buffers.depth + 1)]
    branching = []
    for d in range(buffers.depth):
        counts = [len(buffers.children[i]) for i in range(starts[d], starts[d + 1])]
        branching.append(f"{max(counts)}/{sum(counts) / len(counts):.2g}")
    lines = [
        f"{name}: {buffers.num_nodes} nodes (root included), depth {buffers.depth}, "
        f"{buffers.retrieve_indices.shape[0]} leaves, top-k {buffers.topk}",
        f"  nodes per depth 0..{buffers.depth}: {', '.join(map(str, per_depth))}",
        f"  children per node at depth 0..{buffers.depth - 1} (max/mean): {', '.join(branching)}",
    ]
    if buffers.lookup_nodes:
        lines.append(
            f"  prompt-lookup chain: {len(buffers.lookup_nodes)} nodes (L: tokens copied from the context; "
            "absent on steps without a match)"
        )
    if buffers.num_nodes <= MAX_DRAWN_NODES:
        lines.extend("  " + line for line in drawing(buffers))
    return "\n".join(lines)


def drawing(buffers: TreeBuffers) -> list[str]:
    """The tree as indented ASCII: each node shows its rank (L: prompt lookup) and `#` its node index."""
    ranks = buffers.ranks.tolist()
    lines = ["root #0"]

    def walk(node: int, prefix: str) -> None:
        kids = buffers.children[node]
        for k, child in enumerate(kids):
            last = k == len(kids) - 1
            lines.append(f"{prefix}{'`-- ' if last else '+-- '}{'L' if ranks[child] == LOOKUP else ranks[child]} #{child}")
            walk(child, prefix + ("    " if last else "|   "))

    walk(0, "")
    return lines
