"""Step records of the regime analysis, one per prompt (`{"kind": "generation", "id", "tokens",
"steps": [{"features", "accept_length", "tree"}]}`): from the reference engine's `StepRecord`s, or
replayed over the calibration trajectories (`tree_search.replay`, with the per-position features
of `search calibrate`, whose cache is reused when it was made with the same settings), and the
check of a replay against the engine. Prompt-lookup features are added from the context when the
tree has no lookup branch."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tree_search.replay import output_tokens


def lookup_features(context: Sequence[int], lookup, max_tokens: int) -> dict[str, float]:
    match = lookup.propose(list(context), max_tokens)
    return {"lookup_match": float(match.match_length), "lookup_tokens": float(len(match.tokens))}


def generation_record(trajectory_id: str, prompt_ids: Sequence[int], gen, lookup, lookup_len: int) -> dict[str, Any]:
    """One prompt's step rows: features (+ lookup features from the context), accept length."""
    steps = []
    emitted = 1  # the prefill emitted the first root
    for record in gen.steps:
        features = dict(record.features or {})
        if lookup is not None and "lookup_match" not in features:
            context = list(prompt_ids) + gen.token_ids[:emitted]
            features.update(lookup_features(context, lookup, lookup_len))
        steps.append({"features": features, "accept_length": record.accept_length, "tree": record.tree_name})
        emitted += record.accept_length
    return {"kind": "generation", "id": trajectory_id, "tokens": gen.num_tokens, "steps": steps}


def replay_records(folder: Path, settings: dict[str, Any], calibration, name: str, tree, lookup_on: bool,
                   resources, out: Path, progress: bool) -> dict[str, dict[str, Any]]:
    """Step records of `tree` (static) replayed over every calibration trajectory, by prompt id."""
    from entmtp_vllm.lookup import LookupConfig, PromptLookup

    from tree_search.calibrate import CALIBRATE_DIR
    from tree_search.position_features import FEATURES_FILE, build_features, feature_settings
    from tree_search.replay import replay
    from tree_search.resumable import made_with

    wanted = feature_settings(folder, settings, calibration)
    cache = folder / CALIBRATE_DIR / FEATURES_FILE
    if not made_with(cache, "features cache", wanted):  # not calibrate's features: a cache of its own
        cache = out / FEATURES_FILE
    features = build_features(calibration, resources.load, cache, wanted, progress)
    result = replay({"kind": "static", "tree": name}, [(name, tree)], calibration, features, detail=True)
    lookup = PromptLookup(LookupConfig()) if lookup_on and not tree.lookup_length else None
    by_prompt: dict[int, list[dict[str, Any]]] = {}
    for step in result.per_step:
        by_prompt.setdefault(step["prompt"], []).append(step)
    records = {}
    for k, trajectory in enumerate(calibration.trajectories):
        steps = []
        for step in by_prompt.get(k, []):
            row = dict(step["features"])
            if lookup is not None:
                context = trajectory.prompt_ids + trajectory.tokens[: step["position"] + 1]
                row.update(lookup_features(context, lookup, calibration.rank_depth))
            steps.append({"features": row, "accept_length": step["accept_length"], "tree": step["tree"]})
        records[trajectory.id] = {"kind": "generation", "id": trajectory.id,
                                  "tokens": output_tokens(trajectory, calibration.max_tokens, calibration.eos_ids),
                                  "steps": steps}
    return records


def check_against_engine(trajectories, replayed: dict[str, dict[str, Any]], name: str, tree, max_tokens: int,
                         lookup_on: bool, depth: int, resources) -> dict[str, Any]:
    """Run the engine on `trajectories` and compare its step records with the replayed ones."""
    from entmtp_vllm.engine.reference import ReferenceEngine
    from entmtp_vllm.lookup import LookupConfig, PromptLookup
    from entmtp_vllm.topology import TopologyBank

    model, tokenizer, drafter = resources.load()
    engine = ReferenceEngine(model, tokenizer, drafter, TopologyBank([tree], [name]), head_features=True)
    lookup = PromptLookup(LookupConfig()) if lookup_on and not tree.lookup_length else None
    steps = mismatched_steps = 0
    diff = 0.0
    for trajectory in trajectories:
        gen = engine.generate(trajectory.prompt_ids, max_tokens, acceptance="greedy")
        real = generation_record(trajectory.id, trajectory.prompt_ids, gen, lookup, depth)["steps"]
        mine = replayed[trajectory.id]["steps"]
        steps += len(real)
        mismatched_steps += abs(len(real) - len(mine))
        for a, b in zip(real, mine):
            mismatched_steps += a["accept_length"] != b["accept_length"]
            for key, value in a["features"].items():
                diff = max(diff, abs(value - b["features"].get(key, float("nan"))))
    return {"prompts": len(trajectories), "engine_steps": steps, "accept_mismatches": mismatched_steps,
            "max_abs_feature_diff": diff}
