"""Ranking accuracy of a scoring function (paper Eq. 2 and Eq. 3).

accuracy = share of pairs with s(chosen) > s(rejected), strictly; pairs with
s(chosen) == s(rejected) are ties, counted as wrong and reported separately.
The same code gives RM accuracy (s = the RM's sequence reward, Eq. 2) and
policy accuracy (s = s_base, s_ICL, s_global or s_personal, Eq. 3-7).

Summaries are macro-averaged over users (Eq. 2/3/8 are per-user quantities),
with the pooled (micro) value beside them. Ranking accuracy is computed for
every cell; the `metrics.names` registry lists the generation metrics.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np



def pair_outcome(chosen_score: float, rejected_score: float) -> dict[str, float]:
    return {"correct": float(chosen_score > rejected_score), "tie": float(chosen_score == rejected_score)}


def ranking_accuracy(chosen: list[float], rejected: list[float]) -> dict[str, float]:
    """Strict accuracy and tie share of paired scores (×100)."""
    chosen_arr, rejected_arr = np.asarray(chosen, dtype=float), np.asarray(rejected, dtype=float)
    if len(chosen_arr) == 0:
        return {"accuracy": float("nan"), "ties": float("nan"), "n": 0}
    return {
        "accuracy": 100 * float(np.mean(chosen_arr > rejected_arr)),
        "ties": 100 * float(np.mean(chosen_arr == rejected_arr)),
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
