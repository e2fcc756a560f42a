"""`kv_cache_size`: memory read as vLLM's CPU worker reads it, sizes in vLLM's notation."""

from __future__ import annotations

import pytest

from entmtp_vllm.errors import EntMTPError
from entmtp_vllm.kv_cache_size import node_memory, parse_size


def test_node_memory_counts_free_page_cache_and_reclaimable(tmp_path):
    node = tmp_path / "node0"
    node.mkdir()
    (node / "meminfo").write_text(
        "Node 0 MemTotal:        8218396 kB\n"
        "Node 0 MemFree:         4058272 kB\n"
        "Node 0 Active(file):     100000 kB\n"
        "Node 0 Inactive(file):   200000 kB\n"
        "Node 0 SReclaimable:      50000 kB\n"
    )
    memory = node_memory(0, root=tmp_path, cgroup=tmp_path / "no-cgroup")
    assert memory.total == 8218396 * 1024
    assert memory.available == (4058272 + 100000 + 200000 + 50000) * 1024
    cgroup = tmp_path / "cgroup"
    cgroup.mkdir()
    (cgroup / "memory.max").write_text(f"{4 * 2**30}\n")
    (cgroup / "memory.current").write_text(f"{3 * 2**30}\n")
    clamped = node_memory(0, root=tmp_path, cgroup=cgroup)
    assert clamped.total == 4 * 2**30 and clamped.available == 2**30
    (cgroup / "memory.max").write_text("max\n")
    assert node_memory(0, root=tmp_path, cgroup=cgroup) == memory


def test_this_machines_node_is_readable():
    memory = node_memory()
    assert 0 < memory.available <= memory.total


@pytest.mark.parametrize(
    "text, expected",
    [("1024", 1024), ("1k", 1000), ("1K", 1024), ("2G", 2 * 2**30), ("2g", 2 * 10**9), ("1.5G", 3 * 2**29)],
)
def test_parse_size_follows_vllm(text, expected):
    assert parse_size(text, "--kv-cache-memory-bytes") == expected


@pytest.mark.parametrize("text", ["", "1.5", "G", "-1", "2 GiB"])
def test_parse_size_refuses_other_text(text):
    with pytest.raises(EntMTPError, match="--kv-cache-memory-bytes"):
        parse_size(text, "--kv-cache-memory-bytes")
