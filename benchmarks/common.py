"""Shared set-up for the benchmarks: the real news_category query pairs and SmolLM2-135M."""

from __future__ import annotations

import json
import platform
import resource
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
NEWS = ROOT / ".." / "shared" / "data" / "news_category_10k.jsonl"


def machine() -> dict:
    return {"python": sys.version.split()[0], "platform": platform.platform(), "cpu_threads": torch.get_num_threads(),
            "cuda": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None}


def peak_memory_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def news_query_pairs(limit: int | None = None):
    """(dataset, split, query comparisons) of configs/news_category.yaml on the real data."""
    from persalign.core.config import load_config
    from persalign.data.build import build_dataset
    from persalign.data.split import make_split
    from persalign.models.embedders import load_embedder

    if not NEWS.exists():
        sys.exit(f"benchmark needs the real data file {NEWS}")
    config = load_config(str(ROOT / "configs" / "news_category.yaml"), [f"data.path={NEWS}"])
    dataset = build_dataset(config.data, lambda: load_embedder(config.data.embedder, config.cache_dir), config.split)
    split = make_split(dataset, config.split)
    by_id = {c.id: c for c in dataset.comparisons}
    pairs = [by_id[i] for i in split.query_ids()]
    return dataset, split, pairs[:limit] if limit else pairs


def emit(result: dict) -> None:
    """Print the figures as the benchmark's last line (one JSON object)."""
    print(json.dumps(result))
