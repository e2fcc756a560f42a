"""The core scheduling cycle (`scheduling.TreeScheduler`): features, the policy's choice, and the
verified step fed back, as the reference engine, the vLLM proposer and the replay run it."""

from __future__ import annotations

from entmtp_vllm.lookup import LookupMatch
from entmtp_vllm.policies import make_policy
from entmtp_vllm.scheduling import TreeScheduler
from entmtp_vllm.topology import TopologyBank
from entmtp_vllm.tree import Tree


def _bank() -> TopologyBank:
    return TopologyBank([Tree.from_choices([[0]]), Tree.from_choices([[0], [1], [0, 0]])], ["small", "wide"])


def _scheduler(policy, lookup=False) -> TreeScheduler:
    return TreeScheduler(make_policy(policy, _bank()), uses_lookup=lookup)


def test_choose_follows_the_policy_and_observe_pairs_the_entropy_of_the_choice():
    scheduler = _scheduler({"kind": "hysteresis", "conservative": "small", "aggressive": "wide",
                            "tau_on": 0.8, "tau_off": 0.4})
    request = scheduler.new_request()
    scheduler.observe(request, 3)  # nothing chosen yet: nothing to observe
    assert scheduler.features(request, 0.5, [], 1.0, None).recent_accept_mean == 0.0
    assert scheduler.choose(request, scheduler.features(request, 0.95, [], 2.0, None)) == 1
    scheduler.observe(request, 3)
    features = scheduler.features(request, 0.3, [], 0.5, None)
    assert features.recent_accept_mean == 3.0 and features.last_accept_length == 3
    assert features.entropy_ema[4] != 0.5  # the EMA saw the entropy of the choice (2.0)
    assert scheduler.choose(request, features) == 0 and request.policy.switches == 2
    scheduler.observe(request, None)  # a step without a tree: no accept length recorded
    assert scheduler.features(request, 0.3, [], 0.5, None).recent_accept_mean == 3.0


def test_skip_keeps_observing_without_a_choice():
    scheduler = _scheduler({"kind": "static", "tree": "small"})
    request = scheduler.new_request()
    scheduler.skip(request, 1.5)
    scheduler.observe(request, 2)
    assert scheduler.features(request, 0.5, [], 1.0, None).last_accept_length == 2
    assert request.policy.switches == 0


def test_lookup_features_only_with_lookup_trees():
    match = LookupMatch((5, 6, 7), match_length=3, position=0)
    plain = _scheduler({"kind": "static", "tree": 0})
    assert plain.features(plain.new_request(), 0.5, [], 1.0, match).extra == {}
    hybrid = _scheduler({"kind": "static", "tree": 0}, lookup=True)
    request = hybrid.new_request()
    assert hybrid.features(request, 0.5, [], 1.0, match).extra["lookup_match"] == 3
    hybrid.observe(request, None, lookup_proposed=4, lookup_accepted=1)
    assert hybrid.features(request, 0.5, [], 1.0, match).extra["lookup_accept_rate"] == 0.25
