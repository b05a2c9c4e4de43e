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
    blocks, kept = [], []
    for i in range(20_000):  # ~330 MiB, each below the mmap threshold
        blocks.append(torch.randn(64, 64))
        if i % 20 == 19:
            kept.append(torch.zeros(1))  # live blocks among them: the heap's top cannot free itself
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


class PendingExecutor:
    """An executor whose tasks never finish: what the pool starts is what it chose to start."""

    def submit(self, fn, *args):
        from concurrent.futures import Future

        return Future()


def _started(heavy_at_once: int, tmp_path) -> list[str]:
    pool = pool_backend.LocalPool(pool_backend.PoolOptions(2, heavy_at_once=heavy_at_once), tmp_path / "logs")
    pool._pool = PendingExecutor
    heavy, light = pool.remote(len, heavy=True), pool.remote(len)
    for i in range(3):
        heavy.remote(f"heavy {i}")
    for i in range(2):
        light.remote(f"light {i}")
    return sorted(ref.args[0] for ref in pool.running.values())


def test_a_heavy_fit_waits_while_another_runs_and_a_light_task_takes_the_free_worker(tmp_path):
    """Two GenARM fits side by side were the news study's 5.1 GiB peak (2026-11-29): the pool starts a heavy task
    only while fewer than `heavy_at_once` run, and gives the free worker to the most urgent light one."""
    assert _started(1, tmp_path / "one") == ["heavy 0", "light 0"]
    assert _started(2, tmp_path / "two") == ["heavy 0", "heavy 1"]


def test_heavy_at_once_below_one_is_refused():
    from persalign.core.errors import ConfigError

    with pytest.raises(ConfigError, match="--heavy-at-once 0: give a whole number of at least 1"):
        pool_backend.PoolOptions(2, heavy_at_once=0)
