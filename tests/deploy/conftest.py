"""Fixtures of the Ray deployment tests: the embedded model, a local Ray cluster on loopback."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def model_path() -> str:
    from entmtp_vllm.model_store import resolve_model

    try:
        return resolve_model(None)
    except Exception as exc:  # the embedded model cannot be prepared here
        pytest.skip(f"embedded model unavailable: {exc}")


@pytest.fixture(scope="module")
def ray_cluster():
    """A local Ray cluster (2 CPUs, node IP 127.0.0.1, no dashboard); Serve and Ray shut down at
    the end, whatever happened."""
    ray = pytest.importorskip("ray", reason="ray is not installed (pip install -e '.[ray]')")
    from ray import serve

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, _node_ip_address="127.0.0.1")
    try:
        yield
    finally:
        try:
            serve.shutdown()
        finally:
            ray.shutdown()
