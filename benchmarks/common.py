"""Shared set-up for the benchmarks: the real news_category query pairs and SmolLM2-135M."""

from __future__ import annotations

import argparse
import json
import math
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


# --- what each benchmark option may be: argparse types, so a bad value ends in argparse's one line, exit 2 ---
def count(text: str) -> int:
    """A whole number >= 1 (prompts, tokens, repetitions, batch sizes)."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a whole number >= 1, not {text!r}")
    return value


def non_negative(text: str) -> float:
    """A finite number >= 0 (ARGS's λ)."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value >= 0):
        raise argparse.ArgumentTypeError(f"must be a finite number >= 0, not {text!r}")
    return value


def share(text: str) -> float:
    """A share in (0, 1] (of a GPU's peak)."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and 0 < value <= 1):
        raise argparse.ArgumentTypeError(f"must be a share in (0, 1], not {text!r}")
    return value


def existing_file(text: str) -> str:
    if not Path(text).is_file():
        raise argparse.ArgumentTypeError(f"{text}: no such file")
    return text


def existing_folder(text: str) -> str:
    if not Path(text).is_dir():
        raise argparse.ArgumentTypeError(f"{text}: no such folder")
    return text


def run_folder(text: str) -> str:
    """A folder `persalign run -o` wrote (it holds config.yaml)."""
    if not (Path(existing_folder(text)) / "config.yaml").is_file():
        raise argparse.ArgumentTypeError(f"{text}: not a run folder (no config.yaml)")
    return text
