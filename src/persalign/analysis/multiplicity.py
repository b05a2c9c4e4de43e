"""A verdict that counts its comparisons (issue #52 point 3): p-values of the Δ intervals, Holm across a table,
and the leader against the runner-up.

- `difference_p_value`: the p-value that matches the Δ interval (intervals.difference_interval, the union of
  Hall's and the t interval at its skewness and df): the union excludes 0 at level 1 − α exactly when both do,
  so p = max(p_t, p_Hall), p_Hall the α at which Hall's bound reaches 0 (in closed form: Hall's g is increasing).
- `holm`: Holm's (1979) step-down adjustment: across a table of m Δ intervals the chance that any true-zero
  Δ is called non-zero stays ≤ α (each unadjusted interval alone holds 95 %; with 8 of them, some
  interval excludes 0 under a global null 23-28 % of the time).
- `leader_versus_runner_up`: the paired ROUGE-1 difference of the two best deployments over the users both
  have (the same interval as Δ vs greedy). The leader is picked on these users, so the interval leans in its
  favour when the two are close: a "ties" reading is safe, a "writes closest" reading is optimistic by the
  winner's curse (docs/design-notes.md).

    python -c "from persalign.analysis.multiplicity import holm; print(holm([0.01, 0.04, 0.03]))"
"""

from __future__ import annotations

import numpy as np
from scipy import stats

from persalign.analysis.intervals import difference_interval, inflated_skew, tail_df


def _hall_p_value(values: np.ndarray, df: float) -> float:
    """The α at which Hall's (1 − α) interval reaches 0. It holds μ where g((mean − μ)/se) lies in ±t_q, with
    g(T) = T + aT²/3 + a²T³/27 + a/6 increasing (g' = (1 + aT/3)²), so it holds 0 while |g(mean/se)| ≤ t_q; a
    and the t's df are the Δ interval's (intervals.difference_rows_bounds)."""
    n = len(values)
    t = values.mean() / (values.std(ddof=1) / np.sqrt(n))
    a = float(inflated_skew(values)) / np.sqrt(n)
    g = t + a * t * t / 3 + a * a * t ** 3 / 27 + a / 6
    return float(2 * stats.t.sf(abs(g), df))


def difference_p_value(values) -> float | None:
    """p-value of Δ = 0 matching `difference_interval` (None where it gives no interval)."""
    values = np.asarray(values, dtype=float)
    if difference_interval(values, (-np.inf, np.inf))["low"] is None:
        return None
    df = float(tail_df(values))
    t = values.mean() / (values.std(ddof=1) / np.sqrt(len(values)))
    return max(float(2 * stats.t.sf(abs(t), df)), _hall_p_value(values, df))


def holm(p_values: list[float | None]) -> list[float | None]:
    """Holm-adjusted p-values (None stays None: no interval, no test)."""
    index = [i for i, p in enumerate(p_values) if p is not None]
    order = sorted(index, key=lambda i: p_values[i])
    adjusted: list[float | None] = [None] * len(p_values)
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (len(order) - rank) * p_values[i]))
        adjusted[i] = running
    return adjusted


def leader_versus_runner_up(leader: dict[str, float], runner_up: dict[str, float], bounds) -> dict | None:
    """Paired difference leader − runner-up over the users both have ({user: value} each)."""
    users = sorted(set(leader) & set(runner_up))
    if not users:
        return None
    differences = [leader[u] - runner_up[u] for u in users]
    if not np.any(differences):
        return {"mean": 0.0, "low": None, "high": None, "n": len(users), "identical": True}
    return {**difference_interval(differences, bounds), "identical": False}
