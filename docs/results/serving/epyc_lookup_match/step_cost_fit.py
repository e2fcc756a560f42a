"""How well the step budget's online step-cost model predicts the served steps, in one in-process
EntMTP engine: the run of `policy_ab.py entmtp PROMPTS SEQS [JSON]`, with each decode-only step's
measured seconds (less its drafting, as the model learns them) and the model's prediction for its
shape read just before the model learns it (nothing changes what the engine does).

    OMP_NUM_THREADS=2 python docs/results/serving/epyc_lookup_match/step_cost_fit.py PROMPTS SEQS [JSON]

Prints policy_ab.py's JSON line, then per batch size (the first fifth of the steps left out, while
the model is still learning): steps, mean rows, measured and predicted milliseconds, drafting
milliseconds, and within the batch size a straight-line fit of the measured milliseconds against
the draft rows (the marginal cost of one verified draft token at that batch size).
"""

from __future__ import annotations

import runpy
import sys
from pathlib import Path

import numpy as np

from entmtp_vllm.vllm_plugin.proposer import EntMTPProposer

_steps: list[tuple[float, ...]] = []
_record = EntMTPProposer.record_step_time


def _reading_record(self, seconds, shape):
    if shape is not None:
        drafting = self._drafting_seconds
        _steps.append((*shape, seconds - drafting, self.cost_model.cost(*shape), drafting))
    return _record(self, seconds, shape)


def main() -> None:
    EntMTPProposer.record_step_time = _reading_record
    sys.argv = ["policy_ab.py", "entmtp", *sys.argv[1:]]
    runpy.run_path(str(Path(__file__).with_name("policy_ab.py")), run_name="__main__")
    steps = np.array(_steps)[len(_steps) // 5:]
    print(f"decode-only steps after the first fifth: {len(steps)}")
    for batch in sorted(set(steps[:, 0].astype(int))):
        rows = steps[steps[:, 0] == batch]
        if len(rows) < 10:
            continue
        print(f"batch {batch}: {len(rows)} steps, rows {rows[:, 1].mean():.1f}, measured {1e3 * rows[:, 3].mean():.2f} ms, "
              f"predicted {1e3 * rows[:, 4].mean():.2f} ms, drafting {1e3 * rows[:, 5].mean():.2f} ms")
        drafts = rows[:, 1] - rows[:, 0]
        if drafts.std() > 0.5:
            slope, intercept = np.polyfit(drafts, 1e3 * rows[:, 3], 1)
            print(f"   measured ms = {intercept:.2f} + {slope:.3f} x draft rows ({drafts.min():.0f}..{drafts.max():.0f})")


if __name__ == "__main__":
    main()
