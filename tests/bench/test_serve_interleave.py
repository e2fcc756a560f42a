"""Interleaved comparisons (`--interleave W`) without a server: turns, their order, vLLM's
detailed results as records, the memory each server is sized for, the report and bad input.
The run against real servers is in tests/vllm_plugin/test_serve_interleave_e2e.py."""

from __future__ import annotations

import pytest

from entmtp_vllm.bench import serve as bench
from entmtp_vllm.bench.serve import interleave
from entmtp_vllm.bench.serve.statistics import summarize_level
from entmtp_vllm.bench.serve.vllm_client import records_from_vllm
from entmtp_vllm.errors import EntMTPError
from entmtp_vllm.kv_cache_size import GIB, NodeMemory


def test_turns_are_waves_of_the_concurrency_and_cover_every_prompt_once():
    prompts = [f"p{i}" for i in range(46)]
    for concurrency, waves, sizes in ((1, 4, [4] * 11 + [2]), (4, 4, [16, 16, 14]), (16, 4, [46]), (8, 1, [8] * 5 + [6])):
        chunks = interleave.turns(prompts, concurrency, waves)
        assert [len(chunk) for chunk in chunks] == sizes
        assert [p for chunk in chunks for p in chunk] == prompts


def test_levels_of_one_turn_are_named():
    """Where W x concurrency covers every prompt, the level is one turn per server: not paired."""
    assert interleave.single_turn_levels([1, 4, 8, 16], 46, 4) == [16]
    assert interleave.single_turn_levels([1, 4, 8, 16], 46, 1) == []
    assert interleave.single_turn_levels([2, 8], 8, 1) == [8]


def test_turn_order_rotates_within_a_level_and_between_rounds():
    methods = ["vllm", "ngram", "entmtp"]
    level = [interleave.turn_order(methods, 0, t) for t in range(3)]
    for slot in range(3):  # over three turns every server takes every slot
        assert {order[slot] for order in level} == set(methods)
    assert interleave.turn_order(methods, 1, 0) == ["ngram", "entmtp", "vllm"]  # round 2 starts one place on
    assert interleave.turn_order(methods, 1, 2) == methods


def test_vllm_detailed_result_becomes_records_that_sum_like_our_own():
    result = {
        "duration": 4.0,
        "latencies": [1.0, 2.0, 0.5],
        "ttfts": [0.2, 0.4, 0.0],
        "itls": [[0.1, 0.1], [0.2], []],
        "output_lens": [9, 17, 0],
        "errors": ["", "", "Bad Request"],
    }
    records, wall = records_from_vllm(result)
    assert wall == 4.0 and [r.ok for r in records] == [True, True, False]
    assert records[0].tpot_s == pytest.approx(0.1) and records[1].tpot_s == pytest.approx(0.1)
    assert records[2].error == "Bad Request" and records[2].tpot_s is None
    # two turns of one method summed: tokens over the sum of the wall times, every request's TPOT
    level = summarize_level(records + records, 2 * wall, 2)
    assert level["output_tokens"] == 52 and level["output_tokens_per_s"] == pytest.approx(52 / 8.0)
    assert level["completed"] == 4 and level["failed"] == 2 and level["tpot_ms"]["p50"] == pytest.approx(100.0)
    with pytest.raises(EntMTPError, match="--save-detailed"):
        records_from_vllm({"duration": 1.0, "completed": 1})
    # with the turn's prompts: each record's prompt and output text, for the outputs' comparison
    named, _ = records_from_vllm({**result, "generated_texts": ["one", "two", ""]}, ["p1", "p2", "p3"])
    assert [(r.prompt, r.text) for r in named] == [("p1", "one"), ("p2", "two"), ("p3", "")]


def test_interleaved_servers_share_the_memory(monkeypatch):
    """Up together, N servers are each sized for 1/N of the memory (a hub id: the share alone)."""
    from entmtp_vllm.bench.serve import servers

    monkeypatch.setattr(servers, "node_memory", lambda: NodeMemory(node=0, total=16 * GIB, available=12 * GIB))

    def size(**values):
        config = bench.make_config(bench.CompareConfig, entmtp_variants={"x": {}},
                                   methods=["vllm", "ngram", "entmtp", "entmtp-x"], **values)
        argv = bench.entmtp_commands(config, "org/model")["entmtp"].argv
        return int(argv[argv.index("--kv-cache-memory-bytes") + 1])

    alone, together = size(), size(interleave=2)
    assert together == pytest.approx(alone / 4, abs=1)


def test_interleave_is_checked_and_reported():
    with pytest.raises(EntMTPError, match="--interleave"):
        bench.make_config(bench.CompareConfig, interleave=-1)
    with pytest.raises(EntMTPError, match="--interleave .*--duration"):
        bench.make_config(bench.CompareConfig, interleave=2, duration=30.0)
    config = bench.make_config(bench.CompareConfig, concurrency=[1], methods=["vllm", "entmtp"], interleave=3)
    level = summarize_level([], 1.0, 1)
    runs = {"vllm": {"levels": [level]}, "entmtp": {"levels": [level]}}
    results = {"config": config.model_dump(), "model": "m", "num_prompts": 4, "date": "2026-01-01T00:00:00+00:00",
               "runs": runs, "table": bench.compare_table(runs)}
    text = bench.compare_markdown(results)
    assert "Interleaved (`--interleave 3`)" in text and "one turn" not in text  # 4 prompts: turns of 3 and 1
    whole = {**results, "num_prompts": 6, "config": {**results["config"], "concurrency": [1, 4]}}
    assert "At concurrency 4 the level's 6 prompts are one turn" in bench.compare_markdown(whole)  # 1: 2 turns of 3
    plain = {**results, "config": bench.make_config(bench.CompareConfig, concurrency=[1]).model_dump()}
    assert "Interleaved" not in bench.compare_markdown(plain)
