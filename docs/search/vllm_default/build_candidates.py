"""Candidate banks for the vLLM plugin's default bank, from the tree search's frontiers for the
shipped heads (the `tree_search` pipeline's trees served against the default bank).

The frontiers are `entmtp search frontier` outputs for the 4-layer heads on MT-bench's calibration
prompts (`docs/search/heads4/mt_bench`: heads-only, and `hybrid/` with `--lookup 8`). Each
candidate keeps the default bank's header; `run.sh` serves them against it.

- `switch_n4`, `switch_n8`: the default bank's switch (the 5-token prompt-lookup chain on a lookup
  match, else the heads tree), with the heads-only frontier tree of 4 / 8 nodes as its heads tree
  instead of heads 1-2 as a chain;
- `hybrid_n8`, `hybrid_n16`: the hybrid frontier tree of 8 / 16 nodes (the lookup chain and head
  nodes under one root) as one static tree.

    python docs/search/vllm_default/build_candidates.py OUT_DIR
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
FRONTIERS = ROOT / "docs/search/heads4/mt_bench"
DEFAULT_BANK = ROOT / "entmtp_vllm/assets/banks/smollm2-135m-vllm-cpu.json"


def frontier_trees(path: Path) -> dict[str, list]:
    return {tree["name"]: tree["choices"] for tree in json.loads(path.read_text())["trees"]}


def candidates() -> dict[str, dict]:
    default = json.loads(DEFAULT_BANK.read_text())
    header = {key: default[key] for key in ("format", "version", "model", "task", "created")}
    loop = next(tree for tree in default["trees"] if tree["name"] == "loop")
    heads, hybrid = frontier_trees(FRONTIERS / "bank.json"), frontier_trees(FRONTIERS / "hybrid/bank.json")
    banks = {}
    for size in ("n4", "n8"):
        banks[f"switch_{size}"] = dict(header, policy=default["policy"], trees=[{"name": "hydra", "choices": heads[size]}, loop],
                                       metadata={"purpose": f"candidate default vLLM bank: the default switch with the heads-only "
                                                            f"frontier tree {size} (docs/search/heads4/mt_bench) as its heads tree"})
    for size in ("n8", "n16"):
        banks[f"hybrid_{size}"] = dict(header, policy={"kind": "static", "tree": "hybrid"}, trees=[{"name": "hybrid", "choices": hybrid[size]}],
                                       metadata={"purpose": f"candidate default vLLM bank: the hybrid frontier tree {size} "
                                                            f"(docs/search/heads4/mt_bench/hybrid) as one static tree"})
    return banks


def main() -> None:
    if len(sys.argv) != 2:
        sys.exit(f"usage: build_candidates.py OUT_DIR, got {sys.argv[1:]}")
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    for name, bank in candidates().items():
        (out / f"{name}.json").write_text(json.dumps(bank, indent=1) + "\n")
        print(out / f"{name}.json")


if __name__ == "__main__":
    main()
