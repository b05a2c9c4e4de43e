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
def _checked(convert, ok, rule: str):
    """An argparse type: `convert(text)` when it converts and `ok` holds, else argparse's one line with `rule`."""
    def check(text: str):
        try:
            value = convert(text)
        except ValueError:
            value = None
        if value is None or not ok(value):
            raise argparse.ArgumentTypeError(f"must be {rule}, not {text!r}")
        return value
    return check


count = _checked(int, lambda v: v >= 1, "a whole number >= 1")  # prompts, tokens, repetitions, batch sizes
non_negative = _checked(float, lambda v: math.isfinite(v) and v >= 0, "a finite number >= 0")  # ARGS's λ
share = _checked(float, lambda v: math.isfinite(v) and 0 < v <= 1, "a share in (0, 1]")  # of a GPU's peak
seed = _checked(int, lambda v: v >= 0, "a whole number >= 0")  # numpy's generators take no negative seed
correlation = _checked(float, lambda v: math.isfinite(v) and -1 < v < 1, "a correlation in (-1, 1)")  # simulated noise
t_df = _checked(int, lambda v: v >= 3, "a whole number >= 3")  # a t distribution's df with a variance


def tails(text: str) -> int | None:
    """A simulated tail: 'none' (normal) or a t's degrees of freedom >= 3."""
    return None if text == "none" else _checked(int, lambda v: v >= 3, "'none' or a whole number >= 3")(text)


floor = _checked(float, lambda v: v <= 1, "a number <= 1 or -inf")  # a reliability below which nothing is printed


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
