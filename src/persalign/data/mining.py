"""Hard-negative mining for Pref-LaMP (paper §5): each item's most similar items written by another user.

Every item is compared with every pool item of another user (cosine similarity of L2-normalised embeddings):
quadratic in the items, the cost `preflamp.mining_notice` forecasts. The same negatives on every machine:
numpy's float32 BLAS sums a product in an order that follows its thread count (OMP_NUM_THREADS; Ray sets 1 in
its workers) and the CPU's kernels, and its last bits flipped near-ties (a Ray worker once mined 42 of the
small chain's 384 negatives differently). So the fast float32 product only FILTERS: whatever its order, it lies
within γ_n·|q|·|p| of the exact dot product (n the dimensions, γ_n ≈ n·2⁻²⁴, the standard bound for any summation
order); it keeps every item within ERROR_SCALE·(n + 8)·|q|·max|p| (about 4·γ_n) of a row's k-th value, so no
item it drops can be in the exact top k, not even after rounding. The few kept are scored again in float64 —
float32 products are exact there, so any summation order rounds to the same float32: the values of
`embedders.similarities`, which every machine agrees on; ties go to the lowest pool position. 05e585e ran the
whole product in float64: the same negatives at 1.6x the time (bench_mining.py).

    python benchmarks/bench_mining.py --items 34000 --dim 1024
"""

from __future__ import annotations

import numpy as np

BLOCK_ELEMENTS = 50_000_000  # similarities held at once (about 0.5 GB with their masks)
ERROR_SCALE = 2.0 ** -22  # per dimension: 4·2⁻²⁴, twice the two errors (a dropped item's and the k-th's) it must absorb
EXACT_PAIRS = 8192  # candidate pairs scored in float64 at once (their vectors: 2 · 8192 · dim · 8 bytes)


def exact_similarities(queries: np.ndarray, keys: np.ndarray, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
    """float32(queries[rows] · keys[cols]) computed in float64: `embedders.similarities` for a list of pairs."""
    out = np.empty(len(rows), np.float32)
    for start in range(0, len(rows), EXACT_PAIRS):
        part = slice(start, start + EXACT_PAIRS)
        left, right = queries[rows[part]].astype(np.float64), keys[cols[part]].astype(np.float64)
        out[part] = np.einsum("ij,ij->i", left, right)
    return out


def first_k_per_row(rows: np.ndarray, cols: np.ndarray, values: np.ndarray, n_rows: int, k: int) -> np.ndarray:
    """(n_rows, k) columns: per row, the k largest values, largest first, ties by the lowest column (every row
    has at least k pairs)."""
    order = np.lexsort((cols, -values, rows))
    starts = np.searchsorted(rows[order], np.arange(n_rows))
    return cols[order][starts[:, None] + np.arange(k)]


def nearest_other_user(queries: np.ndarray, keys: np.ndarray, same_user: np.ndarray, k: int,
                       longest_key: float) -> np.ndarray:
    """(len(queries), k) key positions with the largest exact similarity, another user's only (`same_user`
    masks the rest), ties by position: the stable top k of the float64 similarities, from a float32 filter
    (`longest_key`: the keys' largest norm, for the filter's error bound)."""
    fast = queries @ keys.T  # float32 BLAS: fast, its last bits follow the thread count and the CPU
    fast[same_user] = -np.inf
    kth = np.partition(fast, fast.shape[1] - k, axis=1)[:, fast.shape[1] - k]  # the k-th largest, no negated copy
    slack = ERROR_SCALE * (queries.shape[1] + 8) * np.linalg.norm(queries.astype(np.float64), axis=1) * longest_key
    rows, cols = np.nonzero(fast >= (kth - slack)[:, None])
    del fast
    return first_k_per_row(rows, cols, exact_similarities(queries, keys, rows, cols), len(queries), k)


def mine_negatives(embeddings: np.ndarray, user_ids: np.ndarray, rows: np.ndarray, pool: np.ndarray, top_k: int,
                   rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """For each of `rows`: (the sampled negative, its top-k neighbours), both indices drawn from `pool`.

    Neighbours are the most cosine-similar pool items written by another user (embeddings are L2-normalised);
    ties are broken by index, so the result is fully determined by the generator.
    """
    counts = np.bincount(user_ids[pool], minlength=int(user_ids.max()) + 1)
    k = min(top_k, len(pool) - int(counts[np.unique(user_ids[rows])].max()))  # every row has k other-user items
    if k < 1:
        raise ValueError("hard negatives need pool items from another user")
    embeddings = np.asarray(embeddings, np.float32)  # float32 products are exact in float64 (the refine's premise)
    neighbours = np.zeros((len(rows), k), dtype=np.int64)
    pool_embeddings, pool_users = embeddings[pool], user_ids[pool]
    longest = float(np.linalg.norm(pool_embeddings.astype(np.float64), axis=1).max())
    step = max(1, BLOCK_ELEMENTS // len(pool))  # memory bounded whatever the pool's size
    for start in range(0, len(rows), step):
        block = rows[start : start + step]
        same_user = user_ids[block, None] == pool_users[None, :]
        nearest = nearest_other_user(embeddings[block], pool_embeddings, same_user, k, longest)
        neighbours[start : start + len(block)] = pool[nearest]
    picks = neighbours[np.arange(len(rows)), rng.integers(0, k, size=len(rows))]
    return picks, neighbours
