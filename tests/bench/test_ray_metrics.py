"""`metrics_from: ray:<dir>`: two replicas' real counter files (the plugin's own `metrics.count`
in separate processes, each with its replica folder as `PROMETHEUS_MULTIPROC_DIR`, as a Ray Serve
replica with `metrics_dir` runs its engine), read with `ray_serve.replica_metrics` and summed; a
level's numbers are over both replicas, and each replica's own are listed. No Ray needed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from entmtp_vllm.bench import serve as bench
from entmtp_vllm.errors import EntMTPError

REPO = Path(__file__).resolve().parents[2]


def _engine_process(folder: Path, counts: dict[str, float], tree: str, active: int, cost: float) -> None:
    """One engine process of a replica: counts into its replica's folder, then exits."""
    folder.mkdir(parents=True, exist_ok=True)
    code = (
        "import sys, json\n"
        "from entmtp_vllm.vllm_plugin import metrics\n"
        "counts, tree, active, cost = json.loads(sys.argv[1])\n"
        "metrics.count('tree_steps', counts.pop('tree_steps'), tree=tree)\n"
        "for name, amount in counts.items(): metrics.count(name, amount)\n"
        "metrics.set_gauge('active_requests', active)\n"
        "metrics.set_gauge('step_cost_ms', cost, coefficient='fixed')\n"
    )
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(folder), "PYTHONPATH": str(REPO)}
    subprocess.run([sys.executable, "-c", code, json.dumps([counts, tree, active, cost])], env=env, check=True, timeout=60)


def test_two_replicas_counters_are_summed_and_listed(tmp_path):
    a, b = tmp_path / "replica-node1-101", tmp_path / "replica-node1-202"
    _engine_process(a, {"tree_steps": 10, "drafted_nodes": 40, "accepted_tokens": 15}, "big", 0, 2.0)
    _engine_process(b, {"tree_steps": 4, "drafted_nodes": 16, "accepted_tokens": 2}, "small", 0, 3.0)
    before = bench.read_replicas(tmp_path)
    assert set(before.replicas) == {a.name, b.name}
    assert before.total("entmtp_tree_steps") == 14 and before.total("entmtp_accepted_tokens") == 17
    # the level: a second engine process of replica a (a new pid file in the same folder) and more on b
    _engine_process(a, {"tree_steps": 6, "drafted_nodes": 30, "accepted_tokens": 12}, "big", 1, 2.5)
    _engine_process(b, {"tree_steps": 8, "drafted_nodes": 24, "accepted_tokens": 6}, "small", 2, 3.5)
    after = bench.read_replicas(tmp_path)
    acc = bench.level_acceptance(before, after)
    assert acc["counted_by"] == "entmtp"  # replica folders hold no vllm:spec_decode series
    assert acc["num_drafts"] == 14 and acc["num_draft_tokens"] == 54 and acc["num_accepted_tokens"] == 18
    assert acc["mean_acceptance_length"] == pytest.approx(1 + 18 / 14)
    assert acc["draft_acceptance_rate"] == pytest.approx(18 / 54)
    assert acc["tree_usage"] == {"big": 6.0, "small": 8.0}
    assert acc["replicas"] == {
        a.name: {"num_drafts": 6.0, "num_draft_tokens": 30.0, "num_accepted_tokens": 12.0},
        b.name: {"num_drafts": 8.0, "num_draft_tokens": 24.0, "num_accepted_tokens": 6.0},
    }
    # gauges are kept per replica, never summed
    gauges = acc["entmtp"]["step_cost_ms"]
    assert gauges[f"coefficient=fixed,replica={b.name}"] == 3.5


def test_sum_replicas_keeps_gauges_apart_and_adds_counters():
    text = "# TYPE entmtp_accepted_tokens_total counter\nentmtp_accepted_tokens_total 3\n" \
           "# TYPE entmtp_active_requests gauge\nentmtp_active_requests 1\n"
    total = bench.sum_replicas({"r1": bench.parse_prometheus(text), "r2": bench.parse_prometheus(text)})
    assert total.total("entmtp_accepted_tokens") == 6
    assert total.series("entmtp_active_requests") == {(("replica", "r1"),): 1.0, (("replica", "r2"),): 1.0}


def test_a_replica_new_during_the_level_counts_from_zero():
    one = bench.parse_prometheus("entmtp_tree_steps_total{tree=\"t\"} 5\nentmtp_accepted_tokens_total 4\n"
                                 "entmtp_drafted_nodes_total 9\n")
    before = bench.sum_replicas({"r1": one})
    after = bench.sum_replicas({"r1": one, "r2": one})
    assert bench.replica_deltas(before, after) == {
        "r1": {"num_drafts": 0.0, "num_draft_tokens": 0.0, "num_accepted_tokens": 0.0},
        "r2": {"num_drafts": 5.0, "num_draft_tokens": 9.0, "num_accepted_tokens": 4.0},
    }


def test_no_replica_folder_is_a_one_line_error(tmp_path):
    with pytest.raises(EntMTPError, match="no replica folder") as error:
        bench.read_replicas(tmp_path)
    assert "\n" not in str(error.value)


def test_metrics_from_is_checked():
    assert bench.make_config(bench.ServeBenchConfig).ray_metrics_dir() is None
    assert bench.make_config(bench.ServeBenchConfig, metrics_from="ray:/tmp/m").ray_metrics_dir() == "/tmp/m"
    with pytest.raises(EntMTPError, match="--metrics-from"):
        bench.make_config(bench.ServeBenchConfig, metrics_from="ray:")
    with pytest.raises(EntMTPError, match="--compare"):
        bench.make_config(bench.CompareConfig, metrics_from="ray:/tmp/m")


def test_report_lists_each_replica(tmp_path):
    level = {"concurrency": 2, "completed": 4, "failed": 0, "errors": [], "output_tokens_per_s": 1.0,
             "requests_per_s": 1.0, "ttft_ms": None, "tpot_ms": None, "itl_ms": None,
             "acceptance": {"num_drafts": 14.0, "num_draft_tokens": 54.0, "num_accepted_tokens": 18.0,
                            "mean_acceptance_length": 1 + 18 / 14, "draft_acceptance_rate": 1 / 3,
                            "replicas": {"replica-a": {"num_drafts": 6.0, "num_draft_tokens": 30.0,
                                                       "num_accepted_tokens": 12.0},
                                         "replica-b": {"num_drafts": 0.0, "num_draft_tokens": 0.0,
                                                       "num_accepted_tokens": 0.0}}}}
    config = bench.make_config(bench.ServeBenchConfig, metrics_from="ray:/tmp/m").model_dump()
    text = bench.markdown_report({"config": config, "model": "entmtp", "base_url": "u", "num_prompts": 4,
                                  "date": "d", "levels": [level]})
    assert "counters from `ray:/tmp/m`" in text
    assert "| 2 | `replica-a` | 6 | 30 | 12 | 3.000 |" in text and "| 2 | `replica-b` | 0 | 0 | 0 | – |" in text
