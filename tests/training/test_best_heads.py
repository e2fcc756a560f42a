"""`best_heads`: the held-out key and the kept best's file."""

from __future__ import annotations

from pathlib import Path

import torch

from entmtp_vllm.training.best_heads import FILE, best_heads_state, eval_key, save_best
from entmtp_vllm.training.teacher_cache import CacheSplit


def _split(tokens: list[int]) -> CacheSplit:
    n = len(tokens)
    return CacheSplit(hidden=torch.zeros(n, 4, dtype=torch.float16), tokens=torch.tensor(tokens),
                      topk_ids=torch.zeros(n, 2, dtype=torch.long), topk_logp=torch.zeros(n, 2),
                      record_end=torch.full((n,), n), num_records=1)


def test_the_key_names_the_positions_and_their_tokens() -> None:
    val = _split([5, 6, 7, 8, 9])
    rows = torch.tensor([0, 2, 4])
    assert eval_key(val, rows) == eval_key(val, rows.clone())
    assert eval_key(val, rows) != eval_key(val, torch.tensor([0, 2, 3]))  # other positions
    assert eval_key(val, rows) != eval_key(_split([5, 6, 1, 8, 9]), rows)  # same positions, another cache


def test_the_best_round_trips_and_nothing_kept_is_none(tmp_path: Path) -> None:
    assert best_heads_state(tmp_path) is None
    state = {"w": torch.arange(3.0)}
    save_best(tmp_path, state, {"step": 7})
    assert torch.equal(best_heads_state(tmp_path)["w"], state["w"])
    assert torch.load(tmp_path / FILE, weights_only=False)["best"] == {"step": 7}
    assert not (tmp_path / "best.tmp").exists()
