"""The per-request scheduling cycle, once for every engine: features → policy → (draft, verify) → observe.

`TreeScheduler.choose` turns what a step knows before drafting (the verifier's p0 and entropy at
the root, the heads' top-1 chain as deep as the policy reads it, the prompt-lookup match) into
the request's `StepFeatures` and the policy's bank index; `TreeScheduler.observe` feeds the
verified step back (accept length, lookup tokens drafted / accepted). The reference engine, the
vLLM proposer and the tree search's replay all run this cycle; each keeps only what is its own
(drafting on a model, drafting in vLLM's batch, or reading recorded trajectories).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

from entmtp_vllm.features import FeatureTracker, StepFeatures
from entmtp_vllm.lookup import LookupConfig, LookupMatch, LookupStats
from entmtp_vllm.policies import Policy, PolicyState


@dataclass
class RequestSchedule:
    """One request's scheduling state."""

    policy: PolicyState
    tracker: FeatureTracker = field(default_factory=FeatureTracker)
    lookup: LookupStats = field(default_factory=LookupStats)
    entropy_at_choice: float | None = None
    """The verifier's entropy when the pending tree was chosen (what `observe` pairs with its
    accept length); None before the first choice."""


class TreeScheduler:
    """A policy over a bank, with the per-request state it reads."""

    def __init__(self, policy: Policy, uses_lookup: bool, lookup_alpha: float = LookupConfig().ema_alpha) -> None:
        self.policy = policy
        self.uses_lookup = uses_lookup
        self.lookup_alpha = lookup_alpha

    def new_request(self) -> RequestSchedule:
        return RequestSchedule(policy=self.policy.new_state(), lookup=LookupStats(self.lookup_alpha))

    def features(
        self, request: RequestSchedule, p0: float, head_top1: Sequence[float], entropy: float, match: LookupMatch | None
    ) -> StepFeatures:
        """The step's features (lookup features only when the bank has lookup trees)."""
        extra = request.lookup.features(match) if self.uses_lookup and match is not None else None
        return request.tracker.features(p0, list(head_top1), entropy, extra)

    def choose(self, request: RequestSchedule, features: StepFeatures) -> int:
        """The policy's bank index for this step (its state follows)."""
        request.entropy_at_choice = features.entropy
        return self.policy.choose(request.policy, features)

    def skip(self, request: RequestSchedule, entropy: float) -> None:
        """A step drafted without asking the policy (an override): its accept length is still
        observed against this entropy."""
        request.entropy_at_choice = entropy

    def observe(
        self, request: RequestSchedule, accept_length: int | None, lookup_proposed: int = 0, lookup_accepted: int = 0
    ) -> None:
        """The verified step: tokens emitted (None: no tree was verified) and the lookup tokens
        drafted / accepted."""
        if accept_length is not None and request.entropy_at_choice is not None:
            request.tracker.observe_step(accept_length, request.entropy_at_choice)
        if lookup_proposed:
            request.lookup.observe(lookup_proposed, lookup_accepted)
