"""Serve benchmark without a server: statistics, Prometheus parsing, comparison ratios, bad input."""

from __future__ import annotations

import json

import pytest

from entmtp_vllm.bench import serve as bench
from entmtp_vllm.bench.serve import RequestResult
from entmtp_vllm.cli.main import main
from entmtp_vllm.errors import EntMTPError

# ------------------------------------------------------------------------------- statistics


def test_percentile_interpolates_like_numpy():
    values = [0.4, 0.1, 0.3, 0.2]  # sorted: .1 .2 .3 .4
    assert bench.percentile(values, 0) == pytest.approx(0.1)
    assert bench.percentile(values, 50) == pytest.approx(0.25)
    assert bench.percentile(values, 90) == pytest.approx(0.37)
    assert bench.percentile(values, 100) == pytest.approx(0.4)
    assert bench.percentile([5.0], 99) == 5.0
    with pytest.raises(ValueError):
        bench.percentile([], 50)


def test_summarize_ms_converts_seconds():
    summary = bench.summarize_ms([i / 1000 for i in range(1, 101)])  # 1..100 ms
    assert summary["mean"] == pytest.approx(50.5)
    assert summary["p50"] == pytest.approx(50.5)
    assert summary["p90"] == pytest.approx(90.1)
    assert summary["p99"] == pytest.approx(99.01)
    assert bench.summarize_ms([]) is None


def test_summarize_level_on_hand_made_timings():
    results = [
        # 11 tokens: TTFT 0.1 s, then 10 more tokens over 1.0 s -> TPOT 0.1 s
        RequestResult(ok=True, latency_s=1.1, ttft_s=0.1, itl_s=[0.2, 0.3, 0.5], output_tokens=11, tokens_from_usage=True),
        # 5 tokens: TTFT 0.3 s, 0.8 s for 4 more -> TPOT 0.2 s
        RequestResult(ok=True, latency_s=1.1, ttft_s=0.3, itl_s=[0.4, 0.4], output_tokens=5, tokens_from_usage=True),
        # one token: no TPOT
        RequestResult(ok=True, latency_s=0.2, ttft_s=0.2, output_tokens=1, tokens_from_usage=True),
        RequestResult(ok=False, latency_s=0.05, error="APIConnectionError: refused"),
        RequestResult(ok=False, latency_s=0.05, error="APIConnectionError: refused"),
        RequestResult(ok=False, latency_s=0.05, error="APITimeoutError: timed out"),
    ]
    level = bench.summarize_level(results, wall_s=2.0, concurrency=4)
    assert level["concurrency"] == 4
    assert (level["requests"], level["completed"], level["failed"]) == (6, 3, 3)
    assert level["errors"] == ["APIConnectionError: refused", "APITimeoutError: timed out"]  # distinct, in order
    assert level["output_tokens"] == 17
    assert level["output_tokens_per_s"] == pytest.approx(8.5)
    assert level["requests_per_s"] == pytest.approx(1.5)
    assert level["tokens_counted_from"] == "usage"
    assert level["ttft_ms"]["mean"] == pytest.approx(200.0)
    assert level["ttft_ms"]["p50"] == pytest.approx(200.0)
    assert level["tpot_ms"]["mean"] == pytest.approx(150.0)
    assert level["tpot_ms"]["p50"] == pytest.approx(150.0)
    assert level["tpot_ms"]["p90"] == pytest.approx(190.0)
    assert level["itl_ms"]["mean"] == pytest.approx(360.0)
    assert level["itl_ms"]["p50"] == pytest.approx(400.0)


def test_summarize_level_keeps_only_a_few_messages_and_survives_no_success():
    results = [RequestResult(ok=False, latency_s=0.1, error=f"Error: {i}") for i in range(20)]
    level = bench.summarize_level(results, wall_s=1.0, concurrency=1)
    assert level["failed"] == 20 and level["completed"] == 0
    assert len(level["errors"]) == bench.MAX_ERROR_MESSAGES
    assert level["ttft_ms"] is None and level["tpot_ms"] is None and level["output_tokens_per_s"] == 0.0
    assert level["tokens_counted_from"] is None


def test_token_count_source_is_reported():
    chunks = RequestResult(ok=True, latency_s=1.0, ttft_s=0.1, output_tokens=4, tokens_from_usage=False)
    usage = RequestResult(ok=True, latency_s=1.0, ttft_s=0.1, output_tokens=4, tokens_from_usage=True)
    assert bench.summarize_level([chunks], 1.0, 1)["tokens_counted_from"] == "chunks"
    assert bench.summarize_level([chunks, usage], 1.0, 1)["tokens_counted_from"] == "mixed"


# --------------------------------------------------------------------------- Prometheus text

MODEL = 'engine="0",model_name="/m/SmolLM2"'

BEFORE = f"""# HELP vllm:spec_decode_num_drafts_total Number of spec decoding drafts.
# TYPE vllm:spec_decode_num_drafts_total counter
vllm:spec_decode_num_drafts_total{{{MODEL}}} 10.0
# TYPE vllm:spec_decode_num_draft_tokens counter
vllm:spec_decode_num_draft_tokens_total{{{MODEL}}} 60.0
vllm:spec_decode_num_draft_tokens_created{{{MODEL}}} 1.7e9
vllm:spec_decode_num_accepted_tokens_total{{{MODEL}}} 5.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{{{MODEL},position="0"}} 4.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{{{MODEL},position="1"}} 1.0
# TYPE entmtp_tree_steps_total counter
entmtp_tree_steps_total{{tree="small"}} 10.0
# TYPE entmtp_tree_switches_total counter
entmtp_tree_switches_total 2.0
# TYPE entmtp_active_requests gauge
entmtp_active_requests 3.0
vllm:num_requests_running{{{MODEL}}} 1.0
"""

AFTER = f"""# TYPE vllm:spec_decode_num_drafts_total counter
vllm:spec_decode_num_drafts_total{{{MODEL}}} 30.0
vllm:spec_decode_num_draft_tokens_total{{{MODEL}}} 180.0
vllm:spec_decode_num_accepted_tokens_total{{{MODEL}}} 35.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{{{MODEL},position="0"}} 20.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{{{MODEL},position="1"}} 11.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{{{MODEL},position="2"}} 4.0
# TYPE entmtp_tree_steps_total counter
entmtp_tree_steps_total{{tree="small"}} 25.0
entmtp_tree_steps_total{{tree="full:2,1,1"}} 7.0
# TYPE entmtp_tree_switches_total counter
entmtp_tree_switches_total 5.0
# TYPE entmtp_active_requests gauge
entmtp_active_requests 0.0
"""


def test_parse_prometheus_reads_samples_labels_and_types():
    snap = bench.parse_prometheus(BEFORE + 'odd{a="x\\"y",b="1"} 2 1700000000\nnot a sample line\nbad{} NaNx\n')
    assert snap.total("vllm:spec_decode_num_drafts") == 10.0
    assert snap.total("vllm:spec_decode_num_draft_tokens") == 60.0  # _created left out
    assert snap.total("vllm:spec_decode_num_accepted_tokens") == 5.0
    assert snap.kind("entmtp_active_requests") == "gauge"
    assert snap.kind("entmtp_tree_steps") == "counter"
    assert snap.series("odd") == {(("a", 'x"y'), ("b", "1")): 2.0}
    assert snap.total("vllm:no_such_series") is None
    assert snap.families("entmtp_") == ["entmtp_active_requests", "entmtp_tree_steps", "entmtp_tree_switches"]


def test_acceptance_delta_between_snapshots():
    acc = bench.acceptance_delta(bench.parse_prometheus(BEFORE), bench.parse_prometheus(AFTER))
    assert acc["num_drafts"] == 20.0 and acc["num_draft_tokens"] == 120.0 and acc["num_accepted_tokens"] == 30.0
    assert acc["mean_acceptance_length"] == pytest.approx(2.5)  # 1 + 30 / 20
    assert acc["draft_acceptance_rate"] == pytest.approx(0.25)
    assert acc["acceptance_rate_per_position"] == pytest.approx([16 / 20, 10 / 20, 4 / 20])
    assert acc["tree_usage"] == {"full:2,1,1": 7.0, "small": 15.0}
    assert acc["entmtp"]["tree_switches"] == 3.0
    assert acc["entmtp"]["active_requests"] == 0.0  # a gauge: its value after, not a difference


def test_acceptance_delta_without_spec_series():
    plain = bench.parse_prometheus(f"vllm:num_requests_running{{{MODEL}}} 0.0\n")
    assert bench.acceptance_delta(plain, plain) is None
    assert bench.acceptance_delta(None, None) is None
    only_entmtp = bench.parse_prometheus("# TYPE entmtp_active_requests gauge\nentmtp_active_requests 1\n")
    acc = bench.acceptance_delta(None, only_entmtp)
    assert acc["mean_acceptance_length"] is None and acc["entmtp"] == {"active_requests": 1.0}


def test_acceptance_delta_with_no_drafts_in_the_level():
    snap = bench.parse_prometheus(AFTER)
    acc = bench.acceptance_delta(snap, snap)
    assert acc["num_drafts"] == 0.0 and acc["mean_acceptance_length"] is None
    assert acc["acceptance_rate_per_position"] is None


def test_metrics_url_is_beside_the_api_root():
    assert bench.metrics_url("http://h:8000/v1") == "http://h:8000/metrics"
    assert bench.metrics_url("http://h:8000/v1/") == "http://h:8000/metrics"
    assert bench.metrics_url("http://h:8000") == "http://h:8000/metrics"


# --------------------------------------------------------------------------------- comparison


def _level(concurrency, tps, tpot_p50, tau=None, failed=0):
    return {
        "concurrency": concurrency,
        "completed": 4,
        "failed": failed,
        "errors": [],
        "output_tokens_per_s": tps,
        "requests_per_s": 1.0,
        "ttft_ms": {"mean": 50.0, "p50": 40.0, "p90": 60.0, "p99": 70.0},
        "tpot_ms": {"mean": tpot_p50, "p50": tpot_p50, "p90": tpot_p50, "p99": tpot_p50},
        "itl_ms": None,
        "latency_ms": None,
        "acceptance": {"mean_acceptance_length": tau} if tau else None,
    }


def _runs():
    return {
        "vllm": {"levels": [_level(1, 10.0, 100.0), _level(4, 30.0, 130.0)]},
        "ngram": {"levels": [_level(1, 15.0, 80.0, tau=2.0), _level(4, 33.0, 120.0, tau=2.0)]},
        "entmtp": {"levels": [_level(1, 12.5, 90.0, tau=1.5), _level(4, 24.0, 150.0, tau=1.5, failed=1)]},
    }


def test_compare_table_ratios_against_no_speculation():
    rows = bench.compare_table(_runs())
    assert [(r["concurrency"], r["method"]) for r in rows] == [
        (1, "vllm"), (1, "ngram"), (1, "entmtp"), (4, "vllm"), (4, "ngram"), (4, "entmtp")
    ]
    by = {(r["concurrency"], r["method"]): r for r in rows}
    assert by[1, "vllm"]["tps_ratio"] == 1.0 and by[1, "vllm"]["tpot_ratio"] == 1.0
    assert by[1, "ngram"]["tps_ratio"] == pytest.approx(1.5)
    assert by[1, "ngram"]["tpot_ratio"] == pytest.approx(0.8)
    assert by[1, "entmtp"]["tps_ratio"] == pytest.approx(1.25)
    assert by[4, "entmtp"]["tps_ratio"] == pytest.approx(0.8)
    assert by[4, "entmtp"]["tpot_ratio"] == pytest.approx(150 / 130)
    assert by[4, "entmtp"]["mean_acceptance_length"] == 1.5 and by[4, "entmtp"]["failed"] == 1
    assert by[1, "vllm"]["client_cpu_share"] is None  # not measured: no share
    runs = _runs()
    runs["vllm"]["levels"][0].update(client_cpu_s=3.0, wall_s=12.0)
    assert bench.compare_table(runs)[0]["client_cpu_share"] == pytest.approx(0.25)


def test_compare_table_without_baseline_has_no_ratios():
    runs = _runs()
    del runs["vllm"]
    rows = bench.compare_table(runs)
    assert all(r["tps_ratio"] is None and r["tpot_ratio"] is None for r in rows)


def test_compare_and_serve_reports(tmp_path):
    config = bench.make_config(bench.CompareConfig, concurrency=[1, 4], max_tokens=32, server_args=["--dtype", "float32"])
    results = {
        "config": config.model_dump(), "model": "/m/SmolLM2", "num_prompts": 4, "date": "2026-01-01T00:00:00+00:00",
        "runs": _runs(), "table": bench.compare_table(_runs()),
    }
    text = bench.compare_markdown(results)
    assert "| 1 | ngram | 15.00 | 1.500 | 80.0 | 0.800 | 40.0 | 2.000 | – | – | 4 | 0 |" in text
    assert "--dtype float32" in text
    assert "Warning" not in text
    slow = {**results, "runs": _runs()}
    slow["runs"]["entmtp"]["levels"][0]["window"] = {"seconds": 10.0, "read_s": 1.0, "output_tokens": 600.0,
                                                     "output_tokens_per_s": 60.0}
    assert "Warning: `entmtp` at concurrency 1 the deadline's counter read took 1.00 s" in bench.compare_markdown(slow)
    paths = bench.write_compare_report(results, tmp_path / "cmp")
    assert json.loads(paths["json"].read_text())["table"][0]["method"] == "vllm"
    assert paths["png"].stat().st_size > 1000

    serve_config = bench.make_config(bench.ServeBenchConfig, concurrency=[1, 4])
    single = {
        "config": serve_config.model_dump(), "model": "m", "base_url": "http://x/v1", "num_prompts": 4,
        "date": "2026-01-01T00:00:00+00:00", "levels": _runs()["entmtp"]["levels"],
    }
    single["levels"][0]["acceptance"] = {"mean_acceptance_length": 1.5, "num_drafts": 2.0, "num_draft_tokens": 12.0,
                                         "num_accepted_tokens": 1.0, "draft_acceptance_rate": 1 / 12,
                                         "tree_usage": {"full:2,1,1": 2.0}}
    report = bench.markdown_report(single)
    assert "| 1 | 4 | 0 | 12.50 |" in report and "`full:2,1,1` 2" in report
    paths = bench.write_report(single, tmp_path / "one")
    assert paths["markdown"].read_text() == report and paths["png"].stat().st_size > 1000
    assert "Warning" not in report
    single["levels"][1]["window"] = {"seconds": 10.0, "read_s": 2.0, "output_tokens": 600.0, "output_tokens_per_s": 60.0}
    assert "Warning: at concurrency 4 the deadline's counter read took 2.00 s of a 10.00 s window; " \
           "its output tok/s is uncertain by ±10%" in bench.markdown_report(single)


def test_round_order_rotates_so_every_server_takes_every_slot():
    methods = ["vllm", "ngram", "entmtp"]
    orders = [bench.round_order(methods, r) for r in range(4)]
    assert orders[0] == methods and orders[1] == ["ngram", "entmtp", "vllm"] and orders[2] == ["entmtp", "vllm", "ngram"]
    assert orders[3] == methods
    for slot in range(3):
        assert {order[slot] for order in orders[:3]} == set(methods)


def _rounds(tps_by_round):
    """Runs of several rounds: tps_by_round[r][method] = output tok/s at concurrency 1."""
    return [
        {method: {"command": [method], "log": f"{method}-r{r}", "levels": [_level(1, tps, 1000.0 / tps, tau=r + 1.0)]}
         for method, tps in by_method.items()}
        for r, by_method in enumerate(tps_by_round)
    ]


def test_median_runs_keep_the_median_round_whole():
    rounds = _rounds([{"vllm": 30.0, "entmtp": 50.0}, {"vllm": 32.0, "entmtp": 46.0}, {"vllm": 31.0, "entmtp": 49.0}])
    merged = bench.median_runs(rounds)
    entmtp = merged["entmtp"]["levels"][0]
    # the median tok/s is round 3's (49), and its TPOT and tau come from that same round
    assert entmtp["output_tokens_per_s"] == 49.0 and entmtp["tpot_ms"]["p50"] == pytest.approx(1000 / 49)
    assert entmtp["acceptance"]["mean_acceptance_length"] == 3.0 and entmtp["rounds"] == 3
    assert merged["vllm"]["levels"][0]["output_tokens_per_s"] == 31.0
    assert merged["entmtp"]["logs"] == ["entmtp-r0", "entmtp-r1", "entmtp-r2"]
    # an even number of rounds: the lower middle one
    assert bench.median_runs(rounds[:2])["entmtp"]["levels"][0]["output_tokens_per_s"] == 46.0


def test_compare_markdown_lists_every_round():
    config = bench.make_config(bench.CompareConfig, concurrency=[1], methods=["vllm", "entmtp"], rounds=3)
    by_round = [{"vllm": 30.0, "entmtp": 50.0}, {"vllm": 32.0, "entmtp": 46.0}, {"vllm": 31.0, "entmtp": 49.0}]
    rounds = [
        {"order": bench.round_order(["vllm", "entmtp"], r), "runs": runs, "table": bench.compare_table(runs)}
        for r, runs in enumerate(_rounds(by_round))
    ]
    merged = bench.median_runs([entry["runs"] for entry in rounds])
    results = {
        "config": config.model_dump(), "model": "m", "num_prompts": 4, "date": "2026-01-01T00:00:00+00:00",
        "runs": merged, "table": bench.compare_table(merged), "rounds": rounds,
    }
    text = bench.compare_markdown(results)
    assert "| 1 | entmtp | 49.00 | 1.581 |" in text  # median rounds: 49 / 31
    assert "| 2 | entmtp, vllm | 1 | 32.00 (1.000) | 46.00 (1.438) |" in text
    # per-round ratios 50/30, 46/32, 49/31: median 1.581, range 1.438-1.667
    assert "- concurrency 1, `entmtp`: 1.581 (1.438–1.667)" in text
    (spread,) = bench.round_ratios(rounds)
    assert spread["method"] == "entmtp" and spread["ratios"] == pytest.approx([50 / 30, 46 / 32, 49 / 31])
    assert (spread["min"], spread["max"]) == (pytest.approx(46 / 32), pytest.approx(50 / 30))


def test_rounds_flag_is_checked():
    with pytest.raises(EntMTPError, match="--rounds"):
        bench.make_config(bench.CompareConfig, rounds=0)


def test_server_commands_share_one_base():
    config = bench.make_config(bench.CompareConfig, server_args=["--dtype", "float32", "--max-model-len", "2048"],
                               bank="chain:2")
    entmtp_command = bench._entmtp_command(config, "org/model")  # a hub id: not resolved
    commands = bench.server_commands(config, entmtp_command, "127.0.0.1", 9001)
    plain, ngram, entmtp = (commands[m].argv for m in ("vllm", "ngram", "entmtp"))
    assert "--speculative-config" not in plain and "--additional-config" not in plain
    assert plain[1:3] == ["serve", "org/model"] and "--enforce-eager" in plain
    assert plain[-4:] == ["--host", "127.0.0.1", "--port", "9001"]
    spec = json.loads(ngram[ngram.index("--speculative-config") + 1])
    assert spec == {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4, "prompt_lookup_min": 2}
    assert json.loads(entmtp[entmtp.index("--speculative-config") + 1])["method"] == "entmtp"
    assert json.loads(entmtp[entmtp.index("--additional-config") + 1])["entmtp"]["bank"] == "chain:2"
    sizes, gemms, threads = set(), set(), set()
    for built in commands.values():
        command = built.argv
        assert "--max-model-len" in command and command[command.index("--dtype") + 1] == "float32"
        # on CPU every server's worker inside its engine core's process unless asked otherwise
        assert command[command.index("--distributed-executor-backend") + 1] == "uni"
        assert _without_gemm(built.env).get("VLLM_ENABLE_V1_MULTIPROCESSING") == "0"
        sizes.add(command[command.index("--kv-cache-memory-bytes") + 1])  # sized once for every server
        gemms.add(built.env.get("ENTMTP_CPU_GEMM"))  # one matrix multiply for every server
        threads.add(built.env.get("OMP_NUM_THREADS"))  # the same torch threads for every server
    assert len(sizes) == 1 and len(gemms) == 1 and len(threads) == 1
    own = bench.make_config(bench.CompareConfig, in_process=False)  # --no-in-process: vLLM's own layout
    for built in bench.server_commands(own, bench._entmtp_command(own, "org/model"), "h", 1).values():
        assert "--distributed-executor-backend" not in built.argv and _without_gemm(built.env) == {}
    mine = bench.make_config(bench.CompareConfig, in_process=True, server_args=["--distributed-executor-backend=mp"])
    for built in bench.server_commands(mine, bench._entmtp_command(mine, "org/model"), "h", 1).values():
        assert "--distributed-executor-backend=mp" in built.argv and "uni" not in built.argv
        assert _without_gemm(built.env) == {}
    one = bench.make_config(bench.CompareConfig, threads=1)  # --server-threads 1
    for built in bench.server_commands(one, bench._entmtp_command(one, "org/model"), "h", 1).values():
        assert built.env["OMP_NUM_THREADS"] == "1"
    off = bench.make_config(bench.CompareConfig, cpu_gemm="vllm", server_args=["--dtype", "float32"])
    for built in bench.server_commands(off, bench._entmtp_command(off, "org/model"), "h", 1).values():
        assert built.env["ENTMTP_CPU_GEMM"] == "vllm"


def test_variants_are_the_entmtp_server_with_other_settings():
    config = bench.make_config(
        bench.CompareConfig, server_args=["--dtype", "float32"], entmtp_config='{"budget": null}',
        entmtp_variants={"chain4": {"bank": "chain:4"}, "tree.b": {"bank": "full:2,1", "budget": {}}},
        methods=["vllm", "entmtp", "entmtp-chain4", "entmtp-tree.b"],
    )
    built = bench.entmtp_commands(config, "org/model")
    assert list(built) == ["entmtp", "entmtp-chain4", "entmtp-tree.b"]
    commands = bench.server_commands(config, built["entmtp"], "h", 1, variants=built)
    assert list(commands) == config.methods
    settings, budgets, sizes = {}, {}, set()
    for method, command in commands.items():
        argv = command.argv
        sizes.add(argv[argv.index("--kv-cache-memory-bytes") + 1])  # one KV cache size for every server
        assert argv[argv.index("--dtype") + 1] == "float32" and argv[-4:] == ["--host", "h", "--port", "1"]
        if method != "vllm":
            settings[method] = json.loads(argv[argv.index("--additional-config") + 1])["entmtp"]
            budgets[method] = json.loads(argv[argv.index("--speculative-config") + 1])["num_speculative_tokens"]
    assert len(sizes) == 1
    assert settings == {"entmtp": {"budget": None}, "entmtp-chain4": {"budget": None, "bank": "chain:4"},
                        "entmtp-tree.b": {"budget": {}, "bank": "full:2,1"}}  # laid over --entmtp-config
    assert budgets["entmtp-chain4"] == 4 and budgets["entmtp-tree.b"] == 4  # each from its own trees
    results = {"config": config.model_dump(), "model": "m", "num_prompts": 4, "date": "2026-01-01T00:00:00+00:00",
               "runs": {m: {"levels": [_level(1, 10.0, 100.0)]} for m in config.methods}, "table": []}
    assert '`entmtp-chain4`: `entmtp` with `{"bank": "chain:4"}`.' in bench.compare_markdown(results)
    broken = bench.make_config(bench.CompareConfig, entmtp_variants={"bad": {"bank": "no-such-bank.json"}})
    with pytest.raises(EntMTPError, match="^--variant bad: ") as info:
        bench.entmtp_commands(broken, "org/model")  # before any server starts
    assert "\n" not in str(info.value)


def test_variant_labels_and_methods_are_checked():
    with pytest.raises(EntMTPError, match="unknown server 'entmtp-x'.*--variant LABEL=JSON"):
        bench.make_config(bench.CompareConfig, methods=["vllm", "entmtp-x"])
    with pytest.raises(EntMTPError, match="--variant 'a b'"):
        bench.make_config(bench.CompareConfig, entmtp_variants={"a b": {}}, methods=["vllm", "entmtp-a b"])
    ok = bench.make_config(bench.CompareConfig, entmtp_variants={"x": {}}, methods=["vllm", "entmtp-x"])
    assert ok.methods == ["vllm", "entmtp-x"]


def _without_gemm(env: dict[str, str]) -> dict[str, str]:
    """A server's variables but the CPU matrix multiply's (tested in test_serve_command.py)."""
    return {key: value for key, value in env.items() if key != "ENTMTP_CPU_GEMM"}


# --------------------------------------------------------------------------------- bad input


@pytest.mark.parametrize("text", ["", " ", "1,,4", "0", "1,-2", "two", "1.5"])
def test_parse_int_list_rejects_bad_levels(text):
    with pytest.raises(EntMTPError, match="--concurrency"):
        bench.parse_int_list(text)


def test_parse_int_list():
    assert bench.parse_int_list("1, 4,16") == [1, 4, 16]


@pytest.mark.parametrize(
    "values, flag",
    [
        ({"concurrency": []}, "--concurrency"),
        ({"concurrency": [0]}, "--concurrency"),
        ({"concurrency": [2, 2]}, "--concurrency"),
        ({"num_prompts": 0}, "--num-prompts"),
        ({"max_tokens": 0}, "--max-tokens"),
        ({"duration": 0}, "--duration"),
        ({"duration": -5}, "--duration"),
        ({"temperature": -0.1}, "--temperature"),
        ({"request_timeout": 0}, "--request-timeout"),
        ({"warmup": -1}, "--warmup"),
        ({"datasets": []}, "--dataset"),
    ],
)
def test_make_config_rejects_bad_values(values, flag):
    with pytest.raises(EntMTPError, match=flag) as info:
        bench.make_config(bench.ServeBenchConfig, **values)
    assert "\n" not in str(info.value)


def test_compare_config_checks():
    with pytest.raises(EntMTPError, match="--health-timeout"):
        bench.make_config(bench.CompareConfig, health_timeout=0)
    with pytest.raises(EntMTPError, match="--methods"):
        bench.make_config(bench.CompareConfig, methods=["vllm", "vllm"])
    with pytest.raises(EntMTPError, match="--methods"):
        bench.make_config(bench.CompareConfig, methods=["eagle"])
    with pytest.raises(EntMTPError, match="prompt_lookup_min"):
        bench.make_config(bench.CompareConfig, ngram_prompt_lookup_min=5, ngram_prompt_lookup_max=4)


def test_config_fields_are_documented():
    for cls in (bench.ServeBenchConfig, bench.CompareConfig):
        undocumented = [name for name, info in cls.model_fields.items() if not info.description]
        assert not undocumented, f"{cls.__name__}: {undocumented}"


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--concurrency", ""], "--concurrency needs at least one value"),
        (["--concurrency", "1,0"], "at least 1"),
        (["--max-tokens", "0"], "--max-tokens"),
        (["--num-prompts", "0"], "--num-prompts"),
        (["--duration", "-1"], "--duration"),
        (["--dataset", ","], "--dataset names no prompt set"),
        (["--compare", "--methods", "vllm,eagle"], "unknown server 'eagle'"),
        (["--compare", "--ngram-config", "4,4"], "--ngram-config takes three integers"),
        (["--compare", "--variant", "chain4"], "--variant 'chain4': write LABEL=JSON"),
        (["--compare", "--variant", "x={"], "--variant x: invalid JSON"),
        (["--compare", "--variant", "x=[1]"], "--variant x: the settings must be a JSON object, got list"),
        (["--compare", "--variant", "x={}", "--variant", "x={}"], "--variant x: given twice"),
        (["--compare", "--variant", "a/b={}"], "--variant 'a/b': a label takes letters"),
    ],
)
def test_cli_bad_input_is_one_line_error(argv, message, capsys):
    assert main(["bench", "serve", "--no-progress", *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("entmtp: error:") and message in err
    assert "Traceback" not in err


def test_unreachable_server_is_a_clear_error(capsys):
    port = bench.free_port()  # nothing listens there
    code = main(["bench", "serve", "--no-progress", "--base-url", f"http://127.0.0.1:{port}/v1", "-n", "1",
                 "--concurrency", "1"])
    assert code == 2
    assert "cannot list the server's models" in capsys.readouterr().err


def test_failed_requests_are_counted_not_fatal(capsys):
    """With --model given, requests to a dead port fail one by one; the run still reports."""
    port = bench.free_port()
    config = bench.make_config(
        bench.ServeBenchConfig, base_url=f"http://127.0.0.1:{port}/v1", model="m", num_prompts=3,
        concurrency=[1, 2], warmup=0, request_timeout=5,
    )
    results = bench.run_serve_bench(config, progress=False)
    assert [level["failed"] for level in results["levels"]] == [3, 3]
    assert all(level["completed"] == 0 for level in results["levels"])
    assert results["levels"][0]["errors"] and "Connection" in results["levels"][0]["errors"][0]
    assert results["levels"][0]["acceptance"] is None
    assert "| 1 | 0 | 3 |" in bench.markdown_report(results)


def test_server_process_reports_log_tail_when_it_dies(tmp_path):
    import sys

    script = "import sys; print('booting'); print('fatal: no model', file=sys.stderr); sys.exit(3)"
    server = bench.ServerProcess([sys.executable, "-c", script], tmp_path / "s.log", "http://127.0.0.1:9/v1", name="x")
    with pytest.raises(EntMTPError, match="exited with status 3") as info:
        server.wait_healthy(timeout=60, poll=0.1)
    assert "fatal: no model" in str(info.value) and str(tmp_path / "s.log") in str(info.value)
    server.stop()


def test_server_process_timeout_stops_it(tmp_path):
    import sys

    server = bench.ServerProcess([sys.executable, "-c", "import time; time.sleep(600)"], tmp_path / "s.log",
                                 f"http://127.0.0.1:{bench.free_port()}/v1", name="sleepy")
    with pytest.raises(EntMTPError, match="did not answer"):
        server.wait_healthy(timeout=1.0, poll=0.2)
    assert server.process.poll() is not None


def test_duration_mode_keeps_sending_cyclically():
    """--duration: prompts are reused until the time is up (here every request fails fast)."""
    config = bench.make_config(
        bench.ServeBenchConfig, base_url=f"http://127.0.0.1:{bench.free_port()}/v1", model="m", num_prompts=2,
        concurrency=[2], warmup=0, duration=0.5, request_timeout=5,
    )
    start = __import__("time").perf_counter()
    results = bench.run_serve_bench(config, progress=False)
    level = results["levels"][0]
    assert level["requests"] > 2 and level["failed"] == level["requests"]
    assert __import__("time").perf_counter() - start < 30
    assert level["window"] is None  # no server counters: the rate is tokens over wall time
    assert level["output_tokens_per_s"] == level["drained_tokens_per_s"]


def test_window_throughput_is_the_server_count_over_the_window():
    from entmtp_vllm.bench.serve.client import window_throughput

    before = bench.parse_prometheus("vllm:generation_tokens_total{model_name=\"m\"} 100\n")
    at_deadline = bench.parse_prometheus("vllm:generation_tokens_total{model_name=\"m\"} 700\n")
    # the read was sent at 9 s and answered at 11 s: the window ends at the midpoint, 10 s
    assert window_throughput(before, at_deadline, 9.0, 11.0) == {"seconds": 10.0, "read_s": 2.0, "output_tokens": 600.0,
                                                                 "output_tokens_per_s": 60.0}
    assert window_throughput(before, None, 9.0, 11.0) is None
    assert window_throughput(bench.parse_prometheus("other 1\n"), at_deadline, 9.0, 11.0) is None
    level = bench.summarize_level([], 12.0, 2, window={"seconds": 10.0, "output_tokens": 600.0, "output_tokens_per_s": 60.0})
    assert level["output_tokens_per_s"] == 60.0 and level["drained_tokens_per_s"] == 0.0


class _FakeStream:
    """An `AsyncStream` stand-in (the OpenAI client's, not vLLM's): yields prepared chunks."""

    def __init__(self, chunks):
        self.chunks = chunks
        self.closed = False

    def __aiter__(self):
        return self._gen()

    async def _gen(self):
        for chunk in self.chunks:
            yield chunk

    async def close(self):
        self.closed = True


def _fake_client(chunks, chat=True, fail=None):
    from types import SimpleNamespace

    stream = _FakeStream(chunks)

    async def create(**kwargs):
        if fail:
            raise fail
        assert kwargs["stream"] and kwargs["stream_options"] == {"include_usage": True}
        return stream

    endpoint = SimpleNamespace(create=create)
    client = SimpleNamespace(chat=SimpleNamespace(completions=endpoint), completions=endpoint)
    return client, stream


def _chat_chunk(content=None, finish=None, usage=None):
    from types import SimpleNamespace

    choices = [] if usage else [SimpleNamespace(delta=SimpleNamespace(content=content), finish_reason=finish)]
    return SimpleNamespace(choices=choices, usage=usage)


def test_stream_request_reads_text_usage_and_falls_back_to_chunks():
    import asyncio
    from types import SimpleNamespace

    config = bench.make_config(bench.ServeBenchConfig, model="m")
    chunks = [_chat_chunk(""), _chat_chunk("Hel"), _chat_chunk("lo"), _chat_chunk(" you", finish="length"),
              _chat_chunk(usage=SimpleNamespace(completion_tokens=7, prompt_tokens=12))]
    client, stream = _fake_client(chunks)
    result = asyncio.run(bench.stream_request(client, config, "m", "hi"))
    assert result.ok and result.text == "Hello you" and stream.closed
    assert result.output_tokens == 7 and result.tokens_from_usage and result.prompt_tokens == 12
    assert result.ttft_s is not None and len(result.itl_s) == 2

    client, _ = _fake_client(chunks[:-1])  # a server without usage: text chunks are counted
    result = asyncio.run(bench.stream_request(client, config, "m", "hi"))
    assert result.output_tokens == 3 and not result.tokens_from_usage

    client, _ = _fake_client([_chat_chunk("", finish="stop")])  # one token without text
    result = asyncio.run(bench.stream_request(client, config, "m", "hi"))
    assert result.ok and result.ttft_s is not None and result.text == ""

    client, _ = _fake_client([], fail=RuntimeError("boom\nsecond line"))
    result = asyncio.run(bench.stream_request(client, config, "m", "hi"))
    assert not result.ok and result.error == "RuntimeError: boom"


def test_entmtp_overhead_per_level_from_metrics():
    """`entmtp_steps`, `entmtp_step_seconds` and `entmtp_overhead_seconds{phase}` deltas become
    the level's step time, each phase per step and EntMTP's share; the reports show them."""
    before = (
        "# TYPE entmtp_steps_total counter\nentmtp_steps_total 10\n"
        "# TYPE entmtp_step_seconds_total counter\nentmtp_step_seconds_total 1.0\n"
        "# TYPE entmtp_overhead_seconds_total counter\n"
        'entmtp_overhead_seconds_total{phase="draft"} 0.1\nentmtp_overhead_seconds_total{phase="plan"} 0.02\n'
    )
    after = (
        "# TYPE entmtp_steps_total counter\nentmtp_steps_total 110\n"
        "# TYPE entmtp_step_seconds_total counter\nentmtp_step_seconds_total 6.0\n"
        "# TYPE entmtp_overhead_seconds_total counter\n"
        'entmtp_overhead_seconds_total{phase="draft"} 0.35\nentmtp_overhead_seconds_total{phase="plan"} 0.07\n'
    )
    acc = bench.acceptance_delta(bench.parse_prometheus(before), bench.parse_prometheus(after))
    overhead = acc["overhead"]
    assert overhead["step_ms"] == pytest.approx(50.0)
    assert overhead["phase_ms"] == pytest.approx({"draft": 2.5, "plan": 0.5})
    assert overhead["share"] == pytest.approx(0.3 / 5.0)
    assert bench.overhead_summary({}) is None
    from entmtp_vllm.bench.serve.report import _overhead_markdown

    lines = _overhead_markdown([{"concurrency": 8, "acceptance": acc}, {"concurrency": 16, "acceptance": None}])
    assert "| 8 | 50.0 | 6.0% | 2.50 | 0.50 |" in lines
    assert not any(line.startswith("| 16 ") for line in lines)


def test_vllm_client_command_and_result(tmp_path):
    """`--client vllm`: the `vllm bench serve` command of one level, and its result JSON as a level
    of this package's format (the tables and ratios then work unchanged)."""
    from entmtp_vllm.bench.serve.compare import model_of
    from entmtp_vllm.bench.serve.config import CompareConfig
    from entmtp_vllm.bench.serve.statistics import compare_table
    from entmtp_vllm.bench.serve.vllm_client import level_from_result, vllm_command, write_prompts

    config = CompareConfig(max_tokens=64, temperature=0.7, concurrency=[1, 8], client="vllm")
    prompts = write_prompts(["a \"quoted\" prompt", "second\nline"], tmp_path / "p.jsonl")
    assert [json.loads(line)["prompt"] for line in prompts.read_text().splitlines()] == ["a \"quoted\" prompt", "second\nline"]
    command = vllm_command(config, "http://127.0.0.1:9/v1", "/m/SmolLM2", prompts, 2, 8, tmp_path, "r.json")
    text = " ".join(command)
    for part in ("bench serve --backend openai-chat --base-url http://127.0.0.1:9 --endpoint /v1/chat/completions",
                 "--dataset-name custom", "--skip-chat-template", "--max-concurrency 8", "--custom-output-len 64",
                 "--temperature 0.7", "--num-prompts 2", "--result-filename r.json"):
        assert part in text, part
    assert "--ignore-eos" not in command
    assert model_of(["vllm", "serve", "/m/SmolLM2", "--port", "1"]) == "/m/SmolLM2"
    assert model_of(["vllm", "serve", "/m/x", "--served-model-name", "entmtp"]) == "entmtp"
    result = {"duration": 10.0, "completed": 2, "failed": 0, "total_output_tokens": 128, "output_throughput": 12.8,
              "request_throughput": 0.2, "mean_ttft_ms": 300.0, "median_ttft_ms": 290.0, "p50_ttft_ms": 290.0,
              "p90_ttft_ms": 320.0, "p99_ttft_ms": 330.0, "mean_tpot_ms": 70.0, "median_tpot_ms": 69.0,
              "p50_tpot_ms": 69.0, "p90_tpot_ms": 75.0, "p99_tpot_ms": 80.0}
    level = level_from_result(result, 8, None)
    assert level["output_tokens_per_s"] == 12.8 and level["tpot_ms"]["p50"] == 69.0 and level["itl_ms"] is None
    faster = level_from_result({**result, "output_throughput": 25.6, "p50_tpot_ms": 34.5}, 8, None)
    rows = compare_table({"vllm": {"levels": [level]}, "entmtp": {"levels": [faster]}})
    assert rows[1]["tps_ratio"] == pytest.approx(2.0) and rows[1]["tpot_ratio"] == pytest.approx(0.5)


def test_duration_clients_stay_busy_until_the_window_is_read():
    """With --duration, the clients keep sending past the deadline until the window's counters
    have been read (a slow /metrics answer must not find idle clients), then stop."""
    import asyncio
    import time
    from types import SimpleNamespace

    from entmtp_vllm.bench.serve.client import run_level

    sends: list[float] = []

    async def create(**kwargs):
        sends.append(time.perf_counter())
        await asyncio.sleep(0.02)
        return _FakeStream([_chat_chunk("x", finish="length")])

    endpoint = SimpleNamespace(create=create)
    client = SimpleNamespace(chat=SimpleNamespace(completions=endpoint), completions=endpoint)
    config = bench.make_config(bench.ServeBenchConfig, model="m", concurrency=[2], duration=0.2)

    async def level():
        window_read = asyncio.Event()
        start = time.perf_counter()
        task = asyncio.create_task(run_level(client, config, "m", ["a", "b"], 2, False, window_read=window_read))
        await asyncio.sleep(0.5)  # the deadline (0.2 s) has passed; the read is still out
        window_read.set()
        answered = time.perf_counter()
        results, _ = await task
        return start, answered, results

    start, answered, results = asyncio.run(level())
    assert all(r.ok for r in results) and len(results) == len(sends)
    assert max(sends) - start > 0.4  # still sending after the deadline, while the read was out
    assert max(sends) <= answered  # and stopped once it was answered


def test_request_seed_travels_with_every_request_and_outputs_are_compared(tmp_path):
    """`--request-seed N`: vLLM's client gets `--extra-body {"seed": N}` and `--save-detailed` (each
    output's text), this package's client sends the seed in the request body; the comparison then
    counts, per level, the prompts whose output equals the baseline's, and the report says it."""
    import asyncio
    from types import SimpleNamespace

    from entmtp_vllm.bench.serve.client import stream_request
    from entmtp_vllm.bench.serve.config import CompareConfig
    from entmtp_vllm.bench.serve.report import compare_markdown
    from entmtp_vllm.bench.serve.statistics import compare_table, level_outputs
    from entmtp_vllm.bench.serve.vllm_client import records_from_vllm, vllm_command

    seeded = CompareConfig(temperature=0.7, request_seed=1234, client="vllm", concurrency=[8])
    command = vllm_command(seeded, "http://127.0.0.1:9/v1", "m", tmp_path / "p.jsonl", 2, 8, tmp_path, "r.json")
    assert json.loads(command[command.index("--extra-body") + 1]) == {"seed": 1234} and "--save-detailed" in command
    unseeded = CompareConfig(temperature=0.7, client="vllm")
    assert not unseeded.keeps_outputs() and unseeded.extra_body() is None
    assert "--extra-body" not in vllm_command(unseeded, "http://127.0.0.1:9/v1", "m", tmp_path / "p.jsonl", 2, 8,
                                              tmp_path, "r.json")
    assert CompareConfig(temperature=0.0).keeps_outputs()  # greedy outputs are compared without a seed
    assert not CompareConfig(temperature=0.0, duration=5.0).keeps_outputs()  # prompts sent cyclically

    sent = {}

    async def create(**kwargs):
        sent.update(kwargs)
        return _FakeStream([_chat_chunk("hi", finish="length")])

    endpoint = SimpleNamespace(create=create)
    client = SimpleNamespace(chat=SimpleNamespace(completions=endpoint), completions=endpoint)
    record = asyncio.run(stream_request(client, bench.make_config(bench.ServeBenchConfig, request_seed=7,
                                                                  ignore_eos=True), "m", "a prompt"))
    assert sent["extra_body"] == {"ignore_eos": True, "seed": 7} and (record.prompt, record.text) == ("a prompt", "hi")

    records = [RequestResult(ok=True, latency_s=1.0, text="x", prompt="b"),
               RequestResult(ok=False, latency_s=1.0, prompt="c", error="boom"),
               RequestResult(ok=True, latency_s=1.0, text="y", prompt="a")]
    assert level_outputs(records, ["a", "b", "c"]) == ["y", "x", None]
    detailed = {"duration": 1.0, "latencies": [1.0] * 3, "ttfts": [0.1] * 3, "itls": [[]] * 3, "output_lens": [1] * 3,
                "generated_texts": ["y", "", "z"], "errors": ["", "boom", ""]}
    assert level_outputs(records_from_vllm(detailed, ["a", "b", "c"])[0], ["a", "b", "c"]) == ["y", None, "z"]
    level = {"concurrency": 8, "output_tokens_per_s": 10.0, "tpot_ms": None, "ttft_ms": None, "completed": 3,
             "failed": 0, "errors": []}
    runs = {"vllm": {"levels": [{**level, "outputs": ["y", "x", None]}]},
            "entmtp": {"levels": [{**level, "outputs": ["y", "w", "z"]}]}}
    rows = compare_table(runs)
    assert [row["same_outputs"] for row in rows] == [None, (1, 2)]
    results = {"config": {**seeded.model_dump(), "server_args": []}, "model": "m", "num_prompts": 3, "date": "d",
               "runs": runs, "table": rows}
    assert "Outputs identical to `vllm`'s, prompt by prompt (T=0.7, seed 1234): `entmtp` 1/2 at concurrency 8." \
        in compare_markdown(results)
