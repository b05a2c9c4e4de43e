"""Hard-negative mining's rate: item pairs compared per second, and its peak memory (data/preflamp.py).

Pref-LaMP compares every item with every pool item of another user (`mine_negatives`): quadratic in the items.
Its notice (`mining_notice`) forecasts the minutes from `PAIRS_PER_SECOND`; this script measures the rate the
constant should hold, on random L2-normalised embeddings (the rate depends on the sizes, not the values) of
`--dim` dimensions, two items per user, every item against every other user's. The similarities are computed
in float64 since 2026-11-28 (`similarities`: numpy's float32 BLAS followed the thread count). Measure alone.

    python benchmarks/bench_mining.py --items 34000 --dim 1024
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from common import count, emit, machine, peak_memory_mib

from persalign.data.mining import BLOCK_ELEMENTS
from persalign.data.preflamp import PAIRS_PER_SECOND, hard_negative_indices


def random_embeddings(items: int, dim: int, seed: int) -> np.ndarray:
    vectors = np.random.default_rng(seed).standard_normal((items, dim)).astype(np.float32)
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=count, default=34_000, help="items (two per user); pairs ≈ items²")
    parser.add_argument("--dim", type=count, default=1024, help="embedding dimensions (hashing-bow: 1024)")
    parser.add_argument("--top-k", type=count, default=10, help="neighbours kept per item")
    args = parser.parse_args()
    embeddings = random_embeddings(args.items, args.dim, seed=0)
    users = [f"user{i // 2}" for i in range(args.items)]
    before_mib = peak_memory_mib()
    start = time.perf_counter()
    hard_negative_indices(embeddings, users, args.top_k, seed=0)
    seconds = time.perf_counter() - start
    pairs = args.items * args.items
    emit({"items": args.items, "dim": args.dim, "pairs": pairs, "seconds": round(seconds, 1),
          "pairs_per_second": float(f"{pairs / seconds:.3g}"), "constant_in_code": PAIRS_PER_SECOND,
          "block_elements": BLOCK_ELEMENTS, "peak_memory_mib": round(peak_memory_mib(), 0),
          "peak_before_mining_mib": round(before_mib, 0), "machine": machine()})


if __name__ == "__main__":
    main()
