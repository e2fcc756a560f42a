"""Where `propose_trees`' time goes, from a py-spy sampling profile of `propose_cost.py`
(a synthetic batch, the heads running every step: the pinned budget has no gate):

    OMP_NUM_THREADS=2 py-spy record -r 500 -f raw -o /tmp/propose16.txt -- \
        python docs/results/serving/epyc_lookup_rates/propose_cost.py 16
    python docs/results/serving/epyc_depth/profile_summary.py /tmp/propose16.txt

Prints the share of `_propose_trees`' samples under each of its direct callees (by function),
then the share of the heads' samples (`TreeDrafter.head_logits`) under each of the heads' layers.
"""

from __future__ import annotations

import collections
import sys


def _name(frame: str) -> str:
    return frame.split(" (")[0]


def main() -> None:
    if len(sys.argv) != 2:
        sys.exit("usage: profile_summary.py PY_SPY_RAW_OUTPUT")
    propose, heads = collections.Counter(), collections.Counter()
    total_propose = total_heads = 0
    with open(sys.argv[1]) as raw:
        for line in raw:
            stack, count = line.rsplit(" ", 1)
            frames, n = stack.split(";"), int(count)
            inside = [i for i, frame in enumerate(frames) if _name(frame).startswith("EntMTPProposer._propose_trees")]
            if not inside:
                continue
            total_propose += n
            below = frames[inside[-1] + 1:]
            propose[_name(below[0]) if below else "(its own lines)"] += n
            names = [_name(frame) for frame in below]
            if "TreeDrafter.head_logits" in names:
                total_heads += n
                layer = next((name for name in names if name in ("ConditionedResBlock.forward", "ResBlock.forward")),
                             "LM head projection")
                heads[layer] += n
    print(f"_propose_trees: {total_propose} samples; under the heads (TreeDrafter.head_logits): "
          f"{100 * total_heads / total_propose:.1f}%")
    for name, n in propose.most_common(8):
        print(f"  {100 * n / total_propose:5.1f}%  {name}")
    print("the heads' samples by layer:")
    for name, n in heads.most_common():
        print(f"  {100 * n / total_heads:5.1f}%  {name}")


if __name__ == "__main__":
    main()
