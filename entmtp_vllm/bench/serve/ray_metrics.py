"""The counters of a Ray Serve app's replicas, summed (`metrics_from: ray:<dir>`).

Ray Serve's proxy serves no `/metrics`, and each EntMTP replica counts its `entmtp_` series in its
own engine processes. A Ray Serve app built with `metrics_dir: <dir>` (`entmtp_vllm.ray_serve`)
gives every replica its own Prometheus multiprocess folder `<dir>/replica-<host>-<pid>`;
`read_replicas(dir)` reads each folder (`entmtp_vllm.ray_serve.replica_metrics`) into a snapshot
and `sum_replicas` adds them up, so that a level's counter deltas (`acceptance_delta`) are over
all replicas. Gauges are not summed (a step-cost coefficient summed over replicas means nothing):
each replica's value is kept under a `replica` label. `replica_deltas` gives every replica's own
drafts and accepted tokens over a level (did every replica get requests?)."""

from __future__ import annotations

from pathlib import Path

from entmtp_vllm.bench.serve.prometheus import ENTMTP_SPEC_SERIES, MetricsSnapshot, _family_name, parse_prometheus
from entmtp_vllm.errors import EntMTPError

REPLICA_LABEL = "replica"
"""The label each replica's gauges get in the summed snapshot (its folder's name)."""


def sum_replicas(replicas: dict[str, MetricsSnapshot]) -> MetricsSnapshot:
    """One snapshot of several replicas': counters (and histograms) summed sample by sample,
    gauges kept apart under a `replica` label; the replicas' own snapshots in `.replicas`."""
    total = MetricsSnapshot(replicas=dict(replicas))
    for name, snapshot in replicas.items():
        total.types.update(snapshot.types)
        for (sample, labels), value in snapshot.samples.items():
            if snapshot.kind(_family_name(sample)) == "gauge":
                labels = tuple(sorted(labels + ((REPLICA_LABEL, name),)))
            key = (sample, labels)
            total.samples[key] = total.samples.get(key, 0.0) + value
    return total


def read_replicas(metrics_dir: str | Path) -> MetricsSnapshot:
    """Every replica folder under `metrics_dir` read and summed; an `EntMTPError` when there is
    none (the folder is not the app's `metrics_dir`, or its replicas run on another node)."""
    from entmtp_vllm.ray_serve import replica_metrics

    texts = replica_metrics(metrics_dir)
    if not texts:
        raise EntMTPError(f"--metrics-from ray:{metrics_dir}: no replica folder there; give the Ray Serve app's "
                          "metrics_dir, as seen from this machine (replicas on other nodes write on their node)")
    return sum_replicas({name: parse_prometheus(text) for name, text in texts.items()})


def replica_deltas(before: MetricsSnapshot | None, after: MetricsSnapshot) -> dict[str, dict[str, float]]:
    """Replica name → its drafts (`num_drafts`), draft tokens and accepted tokens over a level
    (EntMTP's counters, `ENTMTP_SPEC_SERIES`); a replica that appeared during the level starts
    from 0."""
    start = before.replicas if before is not None else {}
    out: dict[str, dict[str, float]] = {}
    for name, snapshot in sorted(after.replicas.items()):
        first = start.get(name, MetricsSnapshot())
        out[name] = {
            key: (snapshot.total(family) or 0.0) - (first.total(family) or 0.0)
            for key, family in ENTMTP_SPEC_SERIES.items()
        }
    return out
