"""Per-position features of the calibration trajectories: what a policy reads at each root position
(p0, entropy, the heads' greedy top-1 chain), from one teacher-forced target forward and the
engine's own `TreeDrafter.begin(...).greedy_chain(D)`; cached in `features.jsonl` (resumable).
Used by the replay of `calibrate` and of `regimes --source replay`."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import torch

from entmtp_vllm.features import entropy

from tree_search.resumable import append_jsonl, resume_jsonl, rewrite_jsonl
from tree_search.trajectories import Calibration, Trajectory

FEATURES_FILE = "features.jsonl"


@dataclass
class PositionFeatures:
    """What a policy reads at each root position i of one trajectory (root = tokens[i])."""

    id: str
    p0: list[float]
    entropy: list[float]
    chain: list[list[float]]
    """The heads' top-1 probabilities along the greedy chain, head 1 first (all heads)."""

    def as_record(self) -> dict[str, Any]:
        return {"kind": "features", "id": self.id, "p0": self.p0, "entropy": self.entropy, "chain": self.chain}

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> PositionFeatures:
        return cls(record["id"], list(record["p0"]), list(record["entropy"]), [list(c) for c in record["chain"]])


@torch.inference_mode()
def trajectory_features(model, drafter, trajectory: Trajectory, positions: int, depth: int) -> PositionFeatures:
    """p0, entropy and the heads' greedy chain at root positions 0..positions-1, as the engine
    computes them: the verifier's distribution of the root (its logits at the position before),
    and `drafter.begin(hidden there, root).greedy_chain(depth)`."""
    device = next(model.parameters()).device
    num_prompt = len(trajectory.prompt_ids)
    positions = min(positions, len(trajectory.tokens))
    seq = torch.tensor(trajectory.prompt_ids + trajectory.tokens[:positions], dtype=torch.long, device=device)
    out = model(input_ids=seq[None], output_hidden_states=True, use_cache=False,
                logits_to_keep=positions + 1)  # the last positions+1 rows: P-1 .. P-1+positions
    logits = out.logits[0, :positions]  # row i: the distribution the root tokens[i] came from
    hidden = out.hidden_states[-1][0]
    probs = torch.softmax(logits.float(), dim=-1)
    p0 = probs.max(dim=-1).values.tolist()
    ent = entropy(probs).tolist()
    chain = []
    prefix = getattr(drafter.heads, "prefix", None) is not None
    if prefix:
        drafter.reset()
        drafter.observe(hidden[:num_prompt], torch.arange(num_prompt))
    for i in range(positions):
        t = num_prompt + i
        if prefix and i > 0:
            drafter.observe(hidden[t - 1 : t], torch.tensor([t - 1]))
        chain.append(drafter.begin(hidden[t - 1], trajectory.tokens[i]).greedy_chain(depth))
    return PositionFeatures(trajectory.id, p0, ent, chain)


def feature_settings(folder: Path, settings: dict[str, Any], calibration: Calibration) -> dict[str, Any]:
    """What a features cache depends on (shared by `calibrate` and `regimes --source replay`)."""
    return {"frontier": str(Path(folder).resolve()), "dtype": settings["dtype"], "prompt_ids": settings["prompt_ids"],
            "max_tokens": calibration.max_tokens, "depth": calibration.rank_depth}


def build_features(calibration: Calibration, load: Callable[[], tuple[Any, Any, Any]], path: Path | None,
                   settings: dict[str, Any], progress: bool = True) -> list[PositionFeatures]:
    """Features of every calibration trajectory, from the cache at `path` when it has them."""
    from tqdm import tqdm

    done: dict[str, PositionFeatures] = {}
    if path is not None:
        records, truncated = resume_jsonl(path, "features cache", settings, "features",
                                          "features cache {path} was made with other settings ({diff}); "
                                          "delete it to start over")
        done = {r["id"]: PositionFeatures.from_record(r) for r in records if r.get("kind") == "features"}
        if truncated:
            rewrite_jsonl(path, settings, [f.as_record() for f in done.values()])
    missing = [t for t in calibration.trajectories if t.id not in done]
    if missing:
        model, _, drafter = load()
        bar = tqdm(total=calibration.num_prompts, initial=calibration.num_prompts - len(missing),
                   desc="features (teacher-forced p0, entropy, head chain)", unit="prompt", disable=not progress)
        for trajectory in missing:
            features = trajectory_features(model, drafter, trajectory, calibration.max_tokens, calibration.rank_depth)
            done[trajectory.id] = features
            if path is not None:
                append_jsonl(path, features.as_record())
            bar.update()
        bar.close()
    return [done[t.id] for t in calibration.trajectories]
