"""A pooled task gives the heap it freed back to the system (issue #73: the pool's peak memory).

    pytest tests/test_pool_memory.py
"""

from __future__ import annotations

import gc

import pytest
import torch

from persalign.runner import pool_backend


def resident_mib() -> float:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * 4096 / 2 ** 20


def test_freed_small_blocks_go_back_to_the_system():
    """Many small tensors freed stay in glibc's heap (the process keeps their pages) until malloc_trim: a worker
    that trained GenARM held ~1.7 GiB through the light tasks after it."""
    before = resident_mib()
    blocks = [torch.randn(64, 64) for _ in range(20_000)]  # ~330 MiB, each below the mmap threshold
    grown = resident_mib() - before
    del blocks
    gc.collect()
    held = resident_mib() - before
    if held < grown / 2:
        pytest.skip("this C library returned the freed blocks by itself: nothing for malloc_trim to do")
    assert pool_backend.give_back_memory()
    assert resident_mib() - before < grown / 4, (grown, held, resident_mib() - before)


def test_a_task_returns_its_result_or_raises_its_error_and_gives_back_memory_either_way(monkeypatch):
    calls = []
    monkeypatch.setattr(pool_backend, "give_back_memory", lambda: calls.append(1) or True)
    assert pool_backend.run_task(lambda a, b: a + b, 2, 3) == 5

    def failing():
        raise ValueError("the task's own error")

    with pytest.raises(ValueError, match="the task's own error"):
        pool_backend.run_task(failing)
    assert len(calls) == 2
