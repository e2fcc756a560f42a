"""`EntMTPProposer` without vLLM: per-request state, policy choice, fallback, side channel.

A fake `vllm_config` and tiny random Hydra heads (hidden 16, vocabulary 40) drive the real
core `TreeDrafter`; nothing here imports vLLM.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from entmtp_vllm.errors import EntMTPError
from entmtp_vllm.heads.drafting import TreeDrafter
from entmtp_vllm.heads.hydra import HydraHeads
from entmtp_vllm.vllm_plugin.config import DEFAULT_BATCH_FALLBACK
from entmtp_vllm.vllm_plugin.proposer import DraftRequest, EntMTPProposer, remaining_tokens

HIDDEN, VOCAB = 16, 40


def _proposer(settings: dict, num_spec: int = 6, spread: float = 0.5) -> EntMTPProposer:
    """The proposer over random heads; a small `spread` makes them unsure (flat distributions)."""
    config = SimpleNamespace(
        speculative_config=SimpleNamespace(num_speculative_tokens=num_spec),
        additional_config={"entmtp": settings},
        model_config=None,
    )
    proposer = EntMTPProposer(config)
    torch.manual_seed(0)
    heads = HydraHeads(HIDDEN, VOCAB, num_heads=3)
    with torch.no_grad():
        for parameter in heads.parameters():
            parameter.normal_(0.0, spread)
    proposer.drafter = TreeDrafter(heads, torch.randn(VOCAB, HIDDEN), torch.randn(VOCAB, HIDDEN))
    return proposer


def _request(req_id: str, p0: float = 0.5, accept_length: int | None = None) -> DraftRequest:
    return DraftRequest(req_id, torch.randn(HIDDEN), root=3, p0=p0, entropy=1.0, accept_length=accept_length)


def _drafts(proposals) -> list[list[int]]:
    return [proposal.drafts if proposal is not None else [] for proposal in proposals]


def test_drafts_follow_bank_node_order():
    proposer = _proposer({"bank": "full:2,1,1", "budget": None})  # no budget: whole trees
    proposals = proposer.propose_trees([_request("a"), None, _request("b")], batch_size=3)
    assert [len(d) for d in _drafts(proposals)] == [6, 0, 6]
    proposal = proposals[0]
    assert proposal.drafts == proposal.tokens[1:].tolist() and int(proposal.tokens[0]) == 3
    assert proposal.tree_index == 0 and proposals[1] is None
    assert proposer.num_live_requests == 2
    proposer.drop(["a", "b"])
    assert proposer.num_live_requests == 0
    assert proposer.stats.requests_freed == 2


def test_subtree_of_a_truncated_draft():
    proposer = _proposer({"bank": "full:2,1,1"})
    buffers, chain = proposer.subtree(0, 3)  # root + the two depth-1 siblings
    assert buffers.num_nodes == 3 and not chain
    assert buffers.parents.tolist() == [-1, 0, 0]
    _, chain = proposer.subtree(0, 2)
    assert chain
    full, _ = proposer.subtree(0, 7)
    assert full is proposer.bank.buffers(0, "cpu")


def test_hysteresis_switches_and_mixes_trees_in_one_batch(tmp_path):
    bank = tmp_path / "bank.json"
    bank.write_text('{"small": [[0]], "wide": [[0], [1], [0, 0]]}')
    proposer = _proposer(
        {"bank": str(bank), "policy": {"kind": "hysteresis", "conservative": "small", "aggressive": "wide",
                                       "tau_on": 0.8, "tau_off": 0.4},
         "budget": {"online": False}}  # the plan must not depend on how long this machine takes to draft
    )
    # s >= p0: a confident request goes wide, an unsure one stays small, in the same step.
    drafts = _drafts(proposer.propose_trees([_request("sure", p0=0.95), _request("unsure", p0=0.1)], batch_size=2))
    assert [len(d) for d in drafts] == [3, 1]
    assert proposer.stats.switches == 1 and proposer.stats.mixed_steps == 1
    proposer.propose_trees([_request("sure", p0=0.3, accept_length=2)], batch_size=1)
    assert proposer.stats.switches == 2
    assert proposer.stats.tree_usage == {"wide": 1, "small": 2}


def test_batch_fallback_above_max_batch():
    proposer = _proposer({"bank": "full:2,1,1", "batch_fallback": {"max_batch": 1, "tree": 0}})
    proposer.propose_trees([_request("a"), _request("b")], batch_size=2)
    assert proposer.stats.fallback_steps == 2
    proposer.propose_trees([_request("a")], batch_size=1)
    assert proposer.stats.fallback_steps == 2


def test_former_default_fallback_stops_drafting_above_four_requests():
    # the rule before the step budget, as an explicit override: max 4, "auto" (no lookup tree here)
    proposer = _proposer({"bank": "full:2,1,1", "budget": None, "batch_fallback": DEFAULT_BATCH_FALLBACK.model_dump()})
    proposals = proposer.propose_trees([_request(str(i)) for i in range(5)], batch_size=5)
    assert proposals == [None] * 5 and proposer.stats.fallback_steps == 5
    drafts = _drafts(proposer.propose_trees([_request(str(i)) for i in range(4)], batch_size=4))
    assert all(len(d) == 6 for d in drafts)  # full:2,1,1 drafts 6 nodes


def _lookup_request(req_id: str, context: list[int]) -> DraftRequest:
    return DraftRequest(req_id, torch.randn(HIDDEN), root=context[-1], p0=0.5, entropy=1.0, accept_length=None,
                        context=torch.tensor(context))


def test_fallback_drafts_only_long_matches_cut_and_within_the_budget(tmp_path):
    bank = tmp_path / "bank.json"
    bank.write_text('{"hydra": [[0]], "loop": [[-1], [-1, -1], [-1, -1, -1], [-1, -1, -1, -1], [-1, -1, -1, -1, -1]]}')
    settings = {"bank": str(bank), "policy": "hysteresis@lookup_match:0.5:hydra,loop",
                "batch_fallback": {"max_batch": 2, "tree": "loop", "min_match": 2, "max_lookup_tokens": 3,
                                   "max_draft_tokens": 5}, "budget": None}
    proposer = _proposer(settings)
    long3 = [7, 8, 9, 10, 11, 12, 13, 7, 8, 9]  # suffix 7,8,9 seen before: match 3, copies 10,11,12,13,7
    long2 = [20, 21, 22, 23, 24, 25, 5, 20, 21]  # match 2 (20,21): copies 22,23,24,25,5
    short = [30, 31, 32, 33, 34, 35, 36, 37, 31]  # only the 1-gram 31 recurs
    none = [1, 2, 3, 4, 5, 6]  # nothing recurs
    requests = [_lookup_request("short", short), _lookup_request("long2", long2),
                _lookup_request("none", none), _lookup_request("long3", long3)]
    drafts = _drafts(proposer.propose_trees(requests, batch_size=4))
    # longest match first: long3 gets 3 tokens (the cut), long2 the 2 left of the budget of 5;
    # the 1-token match and the request without a match draft nothing
    assert drafts == [[], [22, 23], [], [10, 11, 12]]
    assert proposer.stats.fallback_steps == 4
    # the policy still saw every match (the short one switched it to the loop tree too)
    assert proposer.stats.switches == 3
    # at or below max_batch the policy's tree drafts the whole proposal
    drafts = _drafts(proposer.propose_trees(requests[:2], batch_size=2))
    assert drafts == [[32, 33, 34, 35, 36], [22, 23, 24, 25, 5]]


def test_head_feature_policy_reads_head_one_and_skips_it_under_the_fallback(tmp_path, head_calls):
    """hysteresis@head_top1_1 chooses on head 1's top-1 probability at each request's root; under
    the batch fallback (here a lookup-only tree) it does not choose, so no head runs at all."""
    bank = tmp_path / "bank.json"
    bank.write_text('{"small": [[0]], "wide": [[0], [1], [0, 0]], "loop": [[-1], [-1, -1]]}')
    torch.manual_seed(1)  # the requests' hidden states, whatever ran before in this process
    requests = [_request("a"), _request("b")]
    probe = _proposer({"bank": str(bank)})
    p1 = [probe.drafter.begin(r.hidden, r.root).greedy_chain(1)[0] for r in requests]
    assert p1[0] != p1[1]
    tau = sum(p1) / 2
    # whole trees (budget off): the policy's choice, not the step budget's pricing, is under test
    proposer = _proposer({"bank": str(bank), "policy": f"hysteresis@head_top1_1:{tau!r}:small,wide",
                          "batch_fallback": {"max_batch": 2, "tree": "loop"}, "budget": None})
    drafts = _drafts(proposer.propose_trees(requests, batch_size=2))
    assert [len(d) for d in drafts] == [3 if p > tau else 1 for p in p1]
    calls = head_calls(HydraHeads)
    switches = proposer.stats.switches
    drafts = _drafts(proposer.propose_trees(requests + [_request("c")], batch_size=3))  # above max_batch
    assert drafts == [[], [], []] and calls == [] and proposer.stats.switches == switches
    assert proposer.stats.fallback_steps == 3


def test_without_the_entmtp_runner_the_error_names_the_worker():
    proposer = _proposer({"bank": "full:2,1,1"})
    with pytest.raises(EntMTPError, match="--worker-cls at auto .*cpu.worker.EntMTPCPUWorker on CPU, .*cuda.worker.EntMTPGPUWorker on CUDA"):
        proposer.propose([[1]], None, None)
    proposer.drafter = None
    with pytest.raises(EntMTPError, match="worker-cls"):
        proposer.load_model(torch.nn.Linear(1, 1))


def _budget(fixed: float, per_token: float) -> dict:
    return {"prior": {"fixed_ms": fixed, "per_request_ms": 0.0, "per_token_ms": per_token, "per_tree_token_ms": 0.0}}


def test_step_budget_keeps_whole_trees_when_tokens_are_cheap_and_none_when_dear():
    requests = lambda: [_request(str(i)) for i in range(3)]  # noqa: E731
    torch.manual_seed(1)
    whole = _drafts(_proposer({"bank": "full:2,1,1", "budget": None}).propose_trees(requests(), batch_size=3))
    torch.manual_seed(1)
    cheap = _proposer({"bank": "full:2,1,1", "budget": _budget(1000.0, 0.001)})
    assert _drafts(cheap.propose_trees(requests(), batch_size=3)) == whole
    assert cheap.stats.budget_cut_nodes == 0 and cheap.stats.budget_empty == 0
    # a draft row costs a request's row, and the heads are unsure: a node never pays
    dear = _proposer({"bank": "full:2,1,1", "budget": _budget(0.0, 1000.0)}, spread=0.05)
    assert dear.propose_trees(requests(), batch_size=3) == [None] * 3
    assert dear.stats.budget_empty == 3 and dear.stats.budget_cut_nodes == 18
    assert dear.stats.tree_usage == {}  # nothing drafted, nothing counted as a tree step


def test_gate_stops_calling_the_heads_where_nothing_pays_and_keeps_the_policy_state(head_calls):
    proposer = _proposer({"bank": "full:2,1,1", "budget": {**_budget(0.0, 1000.0), "gate_explore_every": 3}}, spread=0.05)
    requests = lambda: [_request(str(i), accept_length=1) for i in range(4)]  # noqa: E731
    assert proposer.propose_trees(requests(), batch_size=4) == [None] * 4  # drafted, nothing kept
    assert proposer.stats.gate_skips == 0 and proposer.stats.budget_empty == 4
    calls = head_calls(HydraHeads)
    for _ in range(2):
        assert proposer.propose_trees(requests(), batch_size=4) == [None] * 4
    assert calls == [] and proposer.stats.gate_skips == 2  # no head ran
    assert proposer.num_live_requests == 4  # the requests' policy state is kept
    proposer.propose_trees(requests(), batch_size=4)  # the third step explores: the heads run
    assert calls and proposer.stats.gate_skips == 2
    # another batch size is judged on its own
    proposer.propose_trees(requests()[:1], batch_size=1)
    assert proposer.stats.gate_skips == 2
    # no gate: every step drafts
    ungated = _proposer({"bank": "full:2,1,1", "budget": {**_budget(0.0, 1000.0), "gate": False}}, spread=0.05)
    for _ in range(3):
        ungated.propose_trees(requests(), batch_size=4)
    assert ungated.gate is None and ungated.stats.gate_skips == 0 and ungated.stats.budget_empty == 12


def test_where_the_gate_stops_the_heads_prompt_lookup_still_drafts(tmp_path, head_calls):
    """Copied tokens need no head call: under the gate the requests whose policy picks the
    lookup-only tree still draft it (and the budget judges it), the others draft nothing."""
    bank = tmp_path / "bank.json"
    bank.write_text('{"hydra": [[0], [0, 0]], "loop": [[-1], [-1, -1], [-1, -1, -1]]}')
    settings = {"bank": str(bank), "policy": "hysteresis@lookup_match:0.5:hydra,loop",
                "budget": {**_budget(100.0, 0.001), "gate_explore_every": 100}}
    proposer = _proposer(settings)
    repeats = [7, 8, 9, 10, 11, 12, 13, 7, 8, 9]  # the suffix 7, 8, 9 was seen: copies 10, 11, 12
    fresh = [1, 2, 3, 4, 5, 6]
    requests = lambda: [_lookup_request("copy", repeats), _lookup_request("new", fresh)]  # noqa: E731
    first = _drafts(proposer.propose_trees(requests(), batch_size=2))
    assert first[0] == [10, 11, 12] and len(first[1]) == 2  # the heads drafted the second request's chain
    proposer.gate._by_batch[2].gain = 0.0  # as if the heads' drafts had been worth nothing lately
    calls = head_calls(HydraHeads)
    assert _drafts(proposer.propose_trees(requests(), batch_size=2)) == [[10, 11, 12], []]
    assert calls == [] and proposer.stats.gate_skips == 1


def test_prompt_lookup_that_stopped_paying_is_drafted_again_once_its_copies_come_true(tmp_path):
    """The lookup's hit rate also learns from proposals the budget did not draft (scored against
    the tokens the request emitted), so a few early misses do not stop prompt lookup for good."""
    bank = tmp_path / "bank.json"
    bank.write_text('{"hydra": [[0]], "loop": [[-1], [-1, -1], [-1, -1, -1]]}')
    settings = {"bank": str(bank), "policy": "hysteresis@lookup_match:0.5:hydra,loop",
                "budget": {**_budget(10.0, 4.0), "online": False}}  # a lookup token pays above a rate of 0.4
    proposer = _proposer(settings)
    period = [1, 2, 3, 4, 5, 6]
    context = period * 2 + [1, 2]  # a loop: the lookup copies 3, 4, 5
    assert _drafts(proposer.propose_trees([_lookup_request("loop", context)], batch_size=1)) == [[3]]
    for _ in range(6):  # its first copies missed
        proposer.record_lookup("loop", 1, 0)
    assert proposer.lookup_rate.rate < 0.4
    drafted, following = [], []
    for _ in range(8):  # the loop goes on: each step emits the next token of the period
        context = context + [period[len(context) % 6]]
        drafted.append(_drafts(proposer.propose_trees([_lookup_request("loop", context)], batch_size=1))[0])
        following.append(period[len(context) % 6])
    assert drafted[0] == []  # the misses stopped it
    resumed = next(k for k, d in enumerate(drafted) if d)  # one scored copy later it drafts again
    assert all(drafted[k][:1] == [following[k]] for k in range(resumed, len(drafted)))  # and keeps drafting
    assert proposer.stats.lookup_unverified == resumed  # the copies scored while nothing was drafted
    assert proposer.stats.lookup_proposed == 0  # scored copies are not counted as verified ones


def test_drafting_time_is_left_out_of_what_the_cost_model_learns():
    proposer = _proposer({"bank": "full:2,1,1", "budget": _budget(10.0, 1.0)})
    proposer.propose_trees([_request("a")], batch_size=1)
    assert proposer._drafting_seconds > 0  # propose_trees timed itself
    for _ in range(60):  # steps of 80 ms, 30 of them drafting
        proposer._drafting_seconds = 0.03
        proposer.record_step_time(0.08, (1, 1, 0))
    assert proposer._drafting_seconds == 0.0
    assert proposer.stats.step_seconds == pytest.approx(60 * 0.08)  # the steps count whole
    assert proposer.cost_model.cost(1, 1, 0) == pytest.approx(0.05, abs=2e-3)  # learnt without drafting


def test_step_budget_cuts_trees_to_a_prefix_in_node_order():
    proposer = _proposer({"bank": "full:2,1,1", "budget": _budget(20.0, 2.0)})
    proposals = proposer.propose_trees([_request(str(i)) for i in range(8)], batch_size=8)
    full = proposer.bank.buffers(0, "cpu")
    for proposal in proposals:
        if proposal is None:
            continue
        n = len(proposal.drafts)
        buffers, _ = proposer.subtree(proposal.tree_index, n + 1)
        assert buffers.nodes == full.nodes[: n + 1]  # a prefix in node order is a subtree
        assert len(proposal.token_probs) == n + 1
    assert proposer.stats.budget_cut_nodes > 0


def test_a_deeper_head_runs_only_where_its_depth_has_paid(tmp_path, head_calls):
    """Depth by depth: before each deeper head level the budget values the nodes still to draft
    at their depth's measured acceptance rate; once depth 2 is never accepted, a step calls head 1
    alone and drafts depth 1 (the nodes it skipped are counted as cut before drafting)."""
    bank = tmp_path / "bank.json"
    bank.write_text('{"chain": [[0], [0, 0], [0, 0, 0]]}')
    proposer = _proposer({"bank": str(bank), "budget": {**_budget(100.0, 5.0), "online": False}}, spread=2.0)
    requests = lambda: [_request(str(i)) for i in range(2)]  # noqa: E731
    calls = head_calls(HydraHeads)
    torch.manual_seed(2)
    first = proposer.propose_trees(requests(), batch_size=2)
    assert sorted(set(calls)) == [1, 2, 3] and all(len(p.drafts) == 3 for p in first)  # nothing measured yet
    assert proposer.stats.budget_undrafted_nodes == 0
    for _ in range(300):  # verified chains: depth 1 accepted, depth 2 rejected
        proposer.record_accepted((1.0, 0.9, 0.9, 0.9), [-1, 0, 1, 2], [0, 1])
    assert proposer.calibration.depth_rate(2) < 0.1
    calls.clear()
    torch.manual_seed(2)
    second = proposer.propose_trees(requests(), batch_size=2)
    assert calls == [1]  # head 2 did not pay: not called
    assert [p.drafts for p in second] == [p.drafts[:1] for p in first]
    assert proposer.stats.budget_undrafted_nodes == 4 and proposer.stats.budget_cut_nodes == 4


def test_measured_steps_move_the_cost_model():
    proposer = _proposer({"bank": "full:2,1,1"})
    before = proposer.cost_model.as_dict()["per_token_ms"]
    for k in range(100):
        tokens = 4 + k % 9
        proposer.record_step_time((10.0 + 0.5 * tokens) / 1e3, (4, tokens, 0))
    proposer.record_step_time(0.5, None)  # a step with prefill: timed, not learnt from
    assert proposer.cost_model.steps == 100 and proposer.stats.steps_timed == 101
    assert proposer.cost_model.as_dict()["per_token_ms"] == pytest.approx(0.5, rel=0.2) != before
    proposer.record_overhead("draft", 0.25)
    proposer.record_overhead("draft", 0.25)
    assert proposer.stats.as_dict()["overhead_seconds"] == {"draft": 0.5}


def test_a_pinned_cost_model_learns_nothing():
    proposer = _proposer({"bank": "full:2,1,1", "budget": {"online": False}})
    proposer.record_step_time(0.01, (4, 8, 0))
    assert proposer.cost_model.steps == 0 and proposer.stats.steps_timed == 1


def _prefix_proposer() -> EntMTPProposer:
    """The proposer over Hydra++ heads as `train-heads --prefix-layer` makes them (window 4)."""
    from entmtp_vllm.heads import PrefixLayerConfig

    proposer = _proposer({"bank": "full:2,1,1", "budget": None})
    prefix = PrefixLayerConfig(num_attention_heads=4, num_key_value_heads=2, head_dim=4, intermediate_size=24,
                               window=4, context="answer")
    torch.manual_seed(1)
    heads = HydraHeads(HIDDEN, VOCAB, num_heads=3, prefix_layer=prefix)
    with torch.no_grad():
        for parameter in heads.parameters():
            parameter.normal_(0.0, 0.5)
    proposer.drafter = TreeDrafter(heads, torch.randn(VOCAB, HIDDEN), torch.randn(VOCAB, HIDDEN))
    return proposer


def test_prefix_layer_heads_get_a_cache_per_request_that_follows_the_accepted_positions():
    proposer = _prefix_proposer()
    assert proposer.observes_positions
    states = torch.randn(12, HIDDEN)
    # after the prefill: the prompt's last position (7); then steps accepting 3 and 1 positions
    steps = [(7, states[:1]), (8, states[1:4]), (11, states[4:5])]
    for first, hidden in steps:
        proposer.propose_trees([DraftRequest("a", hidden[-1], 3, 0.5, 1.0, None, observed=(first, hidden)),
                                DraftRequest("b", hidden[-1], 3, 0.5, 1.0, None, observed=(first, hidden[:1]))], 2)
    fork = proposer._forks["a"]
    assert fork.prefix_cache.positions == [7, 8, 9, 10, 11]
    expected = proposer.drafter.heads.prefix(states[:5], torch.arange(7, 12))[-1]
    torch.testing.assert_close(fork.prefix_cache.last_output, expected, atol=1e-5, rtol=1e-4)
    # "b" skipped positions (9, 10 were never observed): its cache starts again at 11
    assert proposer._forks["b"].prefix_cache.positions == [11]
    assert proposer.stats.prefix_gaps == 1
    assert proposer.drafter.prefix_cache.length == 0  # the shared drafter's own cache is never used
    assert sorted(proposer.prefix_windows) == [(7, 11), (11, 11)]
    proposer.drop(["a", "b"])
    assert proposer.prefix_windows == [] and proposer.num_live_requests == 0


def test_heads_without_a_prefix_layer_share_one_drafter():
    proposer = _proposer({"bank": "full:2,1,1", "budget": None})
    assert not proposer.observes_positions
    proposer.propose_trees([_request("a"), _request("b")], batch_size=2)
    assert proposer.prefix_windows == [] and not proposer._forks


@pytest.mark.parametrize("window,context", [(None, "sequence"), (8, "sequence"), (None, "answer")])
def test_prefix_layers_that_read_the_whole_prompt_are_refused_in_one_line(tmp_path, window, context):
    """The plugin feeds a prefix layer a window from the prompt's last position on: heads
    trained otherwise (Hydra's whole-sequence layer) are refused before anything drafts."""
    from entmtp_vllm.heads import PrefixLayerConfig
    from entmtp_vllm.heads.checkpoint import save_heads

    prefix = PrefixLayerConfig(num_attention_heads=4, num_key_value_heads=2, head_dim=4, intermediate_size=24,
                               window=window, context=context)
    folder = save_heads(HydraHeads(HIDDEN, VOCAB, num_heads=3, prefix_layer=prefix), tmp_path / "heads")
    proposer = _proposer({"bank": "full:2,1,1", "heads": str(folder)})
    proposer.runner_attached = True
    proposer.model_config = SimpleNamespace(hf_text_config=SimpleNamespace(hidden_size=HIDDEN, vocab_size=VOCAB))
    with pytest.raises(EntMTPError, match=f"prefix layer reads context: {context}, window: {window}; .*train-heads --prefix-layer"):
        proposer.load_model(torch.nn.Linear(1, 1))


def test_no_draft_reaches_past_the_requests_end():
    """A request that may emit 3 more tokens drafts at most 2 (the step emits the accepted ones
    plus one), even where every node is cheap."""
    proposer = _proposer({"bank": "chain:3", "budget": {**_budget(1000.0, 0.001), "online": False}}, spread=2.0)
    requests = [_request("a"), _request("b"), _request("c")]
    requests[0].remaining, requests[1].remaining = 3, 1
    drafts = _drafts(proposer.propose_trees(requests, batch_size=3))
    assert [len(d) for d in drafts] == [2, 0, 3]


def test_remaining_tokens_from_vllms_request_state():
    from vllm.sampling_params import SamplingParams
    from vllm.v1.worker.gpu_input_batch import CachedRequestState

    def state(max_tokens):
        return CachedRequestState(req_id="a", prompt_token_ids=[1, 2, 3], mm_features=[],
                                  sampling_params=SamplingParams(max_tokens=max_tokens), generator=None,
                                  block_ids=([],), num_computed_tokens=0, output_token_ids=[4, 5])

    assert remaining_tokens(state(10), num_tokens=5, max_model_len=100) == 8  # 2 of 10 emitted
    assert remaining_tokens(state(10), num_tokens=5, max_model_len=7) == 2  # the model's length first
    assert remaining_tokens(state(None), num_tokens=5, max_model_len=100) == 95
    assert remaining_tokens(state(2), num_tokens=5, max_model_len=100) == 0
    assert remaining_tokens(SimpleNamespace(sampling_params=None), num_tokens=5, max_model_len=100) is None
