"""Correlations between metrics across methods (paper Tables 2, 6 and Figure 1).

Pearson r, Spearman ρ and Kendall τ (scipy.stats) of the observed means, each with a
Fisher-z interval across methods (analysis/intervals.py::correlation_interval), which
treats each method's value as exact; the correlation of the methods' true means, with
the noise each mean carries counted, is analysis/true_correlation.py's. Degenerate input
(fewer than three methods, or a constant metric) gives an explicit reason
instead of NaN, so a report never shows a silent "nan". Values equal up to
float rounding are made exactly equal first: two methods with the same share
of correct pairs reach it by different sums (72.22222222222221 vs ...223),
and ranking that noise changed the study's Kendall τ from -0.22 to -0.30. `distinct_deployments` merges
methods whose per-user rows are identical (one deployment listed twice) before the true-means interval.

    python -c "from persalign.analysis.correlations import correlate; print(correlate([1,2,3,4],[1,3,2,4]))"
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import stats

STATISTICS = {"pearson": stats.pearsonr, "spearman": stats.spearmanr, "kendall": stats.kendalltau}


@dataclass(frozen=True)
class Correlation:
    statistic: str
    value: float | None
    p_value: float | None
    n: int
    reason: str | None = None  # why no value could be computed

    def __str__(self) -> str:
        if self.value is None:
            return f"{self.statistic}: n/a ({self.reason})"
        return f"{self.statistic} = {self.value:+.3f} (p = {self.p_value:.3f}, n = {self.n})"


def undefined_reason(x, y) -> str | None:
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if len(x) != len(y):
        return f"the two metrics have different lengths ({len(x)} vs {len(y)})"
    keep = np.isfinite(x) & np.isfinite(y)
    if keep.sum() < 3:
        return f"needs at least 3 methods with both metrics, got {int(keep.sum())}"
    if np.ptp(x[keep]) == 0 or np.ptp(y[keep]) == 0:
        which = "first" if np.ptp(x[keep]) == 0 else "second"
        return f"the {which} metric is constant across methods, so no correlation is defined"
    return None


def snap_ties(values, rtol: float = 1e-9) -> np.ndarray:
    """Runs of sorted values each within `rtol` of the previous take the run's first value (float noise never
    breaks a tie)."""
    values = np.array(values, dtype=float)
    order = np.argsort(values, kind="stable")
    ordered = values[order]
    starts_run = np.concatenate([[True], ~np.isclose(ordered[1:], ordered[:-1], rtol=rtol, atol=1e-12)])
    run = np.cumsum(starts_run) - 1
    values[order] = ordered[np.flatnonzero(starts_run)][run]
    return values


def correlate(x, y, statistic: str = "kendall") -> Correlation:
    """One correlation between paired per-method values (non-finite pairs dropped)."""
    x, y = (snap_ties(v) if len(v) else np.zeros(0) for v in (x, y))
    reason = undefined_reason(x, y)
    keep = np.isfinite(x) & np.isfinite(y) if len(x) == len(y) else np.zeros(0, bool)
    if reason:
        return Correlation(statistic, None, None, int(keep.sum()), reason)
    result = STATISTICS[statistic](x[keep], y[keep])
    return Correlation(statistic, float(result[0]), float(result[1]), int(keep.sum()))


def correlate_all(x, y) -> dict[str, Correlation]:
    return {name: correlate(x, y, name) for name in STATISTICS}


def distinct_deployments(x_rows: np.ndarray, y_rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The rows with methods that are one deployment merged: methods whose per-user rows are identical on either
    metric (the same generations: on the news study the methods that chose λ = 0 all decode greedily) have equal
    true means there, which true means drawn independently per method cannot have (their likelihood would put the
    true spread at 0). Each such group counts once, its rows averaged user by user; the result is sorted by its
    values, so the simulation's draws and the interval do not depend on the order the methods were listed in."""
    k = len(x_rows)
    group = list(range(k))
    for rows in (x_rows, y_rows):
        scale = 1e-12 * (1 + np.abs(rows).max())
        for i in range(k):
            for j in range(i + 1, k):
                if np.abs(rows[i] - rows[j]).max() <= scale:
                    old, new = max(group[i], group[j]), min(group[i], group[j])
                    group = [new if g == old else g for g in group]
    labels = sorted(set(group))
    merged = [[m for m in range(k) if group[m] == label] for label in labels]
    rows = sorted((tuple(x_rows[m].mean(0)), tuple(y_rows[m].mean(0))) for m in merged)
    return np.array([x for x, _ in rows]), np.array([y for _, y in rows])
