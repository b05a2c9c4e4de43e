"""Ranking accuracy of a scoring function (paper Eq. 2 and Eq. 3).

accuracy = share of pairs with s(chosen) > s(rejected), strictly; pairs whose
scores differ by at most TIE_TOLERANCE × max(1, |s(chosen)|, |s(rejected)|)
are ties, counted as wrong and reported separately. Exact equality is not
used: float reductions differ with the batch (padding changes the order of
sums), scores moved by up to 1.5e-5 between batch sizes 1, 4 and 8, and exact
ties flipped (a tie rate of 100.0 at batch 4 was 83.3 at batch 1). The
tolerance is relative to the score's scale (log-prob sums reach -100; RM
rewards are often below 1, hence the floor of 1).
The same code gives RM accuracy (s = the RM's sequence reward, Eq. 2) and
policy accuracy (s = s_base, s_ICL, s_global or s_personal, Eq. 3-7).

Summaries are macro-averaged over users (Eq. 2/3/8 are per-user quantities),
with the pooled (micro) value beside them. Ranking accuracy is computed for
every cell; the `metrics.names` registry lists the generation metrics.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np

TIE_TOLERANCE = 1e-4


def outcomes(chosen, rejected) -> tuple[np.ndarray, np.ndarray]:
    """(correct, tie) boolean arrays of paired scores (broadcasting), ties within the tolerance."""
    chosen, rejected = np.asarray(chosen, dtype=float), np.asarray(rejected, dtype=float)
    scale = np.maximum(1.0, np.maximum(np.abs(chosen), np.abs(rejected)))
    tie = np.abs(chosen - rejected) <= TIE_TOLERANCE * scale
    return (chosen > rejected) & ~tie, tie


def pair_outcome(chosen_score: float, rejected_score: float) -> dict[str, float]:
    correct, tie = outcomes(chosen_score, rejected_score)
    return {"correct": float(correct), "tie": float(tie)}


def ranking_accuracy(chosen: list[float], rejected: list[float]) -> dict[str, float]:
    """Strict accuracy and tie share of paired scores (×100)."""
    chosen_arr, rejected_arr = np.asarray(chosen, dtype=float), np.asarray(rejected, dtype=float)
    if len(chosen_arr) == 0:
        return {"accuracy": float("nan"), "ties": float("nan"), "n": 0}
    correct, tie = outcomes(chosen_arr, rejected_arr)
    return {
        "accuracy": 100 * float(np.mean(correct)),
        "ties": 100 * float(np.mean(tie)),
        "n": int(len(chosen_arr)),
    }


def user_macro_mean(rows: list[dict], column: str) -> float:
    """Mean over users of each user's mean of `column` (rows carry a `user` key)."""
    per_user: dict[str, list[float]] = defaultdict(list)
    for row in rows:
        if row.get(column) is not None:
            per_user[row["user"]].append(float(row[column]))
    if not per_user:
        return float("nan")
    return float(np.mean([np.mean(values) for values in per_user.values()]))
