"""Offline tree search: the acceptance frontier (Algorithm 1), its debiasing, banks of frontier trees.

- `trajectories.py`: greedy trajectories and the heads' oracle ranks along them (cached per run);
- `resumable.py`: the resumable JSONL caches and logs (a settings header, then the records);
- `scoring.py`: one rollout scores a tree and all its one-node augmentations (what-if);
- `frontier.py`: greedy growth, the resumable log, the whole `search frontier` run;
- `debias.py`: self-rollout re-measurement with the reference engine (`search debias`);
- `throughput.py`, `calibrate.py`, `regimes.py`, `summary.py`: the later stages, with the
  calibration's `position_features.py`, `replay.py`, `policy_grid.py`, `step_costs.py`,
  `calibrate_report.py` and the regime analysis's `regimes_records.py`, `regimes_statistics.py`,
  `regimes_report.py`; `cost_curve.py`: step-cost curves and `rerank`; `resources.py`: lazy loading;
- `report.py`: Markdown, plot and `entmtp-bank` outputs; `cli.py`: the command line
  (`entmtp search ...`, `python -m tree_search ...`).
"""
