"""Offline tree search: the acceptance frontier (Algorithm 1), its debiasing, banks of frontier trees.

- `trajectories.py`: greedy trajectories and the heads' oracle ranks along them (cached per run);
- `resumable.py`: the resumable JSONL caches and logs (a settings header, then the records);
- `scoring.py`: one rollout scores a tree and all its one-node augmentations (what-if);
- `frontier.py`: greedy growth, the resumable log, the whole `search frontier` run;
- `debias.py`: self-rollout re-measurement with the reference engine (`search debias`);
- `report.py`: Markdown, plot and `entmtp-bank` outputs; `cli.py`: the command line
  (`entmtp search ...`, `python -m tree_search ...`).
"""
