"""Bootstrap confidence intervals by resampling adaptation users (seeded).

A per-method metric is a mean over users of per-user means; resampling users
with replacement and recomputing gives its sampling distribution. For a
correlation across methods, every method is recomputed on the SAME resample
of users, then the correlation; with few methods the interval is honestly
wide (and undefined resamples are counted, not hidden).
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np

from persalign.analysis.correlations import correlate


def per_user_means(rows: list[dict], column: str) -> dict[str, float]:
    values: dict[str, list[float]] = defaultdict(list)
    for row in rows:
        if row.get(column) is not None:
            values[row["user"]].append(float(row[column]))
    return {user: float(np.mean(v)) for user, v in values.items()}


def user_resamples(users: list[str], n_boot: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.integers(0, len(users), size=(n_boot, len(users)))


def metric_ci(user_means: dict[str, float], n_boot: int = 1000, seed: int = 0, level: float = 0.95) -> dict:
    users = sorted(user_means)
    values = np.array([user_means[u] for u in users])
    draws = values[user_resamples(users, n_boot, seed)].mean(axis=1)
    low, high = np.quantile(draws, [(1 - level) / 2, 1 - (1 - level) / 2])
    return {"mean": float(values.mean()), "low": float(low), "high": float(high), "level": level}


def correlation_ci(means_x: list[dict[str, float]], means_y: list[dict[str, float]], statistic: str = "kendall",
                   n_boot: int = 1000, seed: int = 0, level: float = 0.95) -> dict:
    """CI of the across-method correlation; each list has one {user: mean} per method."""
    users = sorted(set.intersection(*(set(m) for m in means_x + means_y)))
    x = np.array([[m[u] for u in users] for m in means_x])  # (methods, users)
    y = np.array([[m[u] for u in users] for m in means_y])
    point = correlate(x.mean(1), y.mean(1), statistic)
    values, undefined = [], 0
    for sample in user_resamples(users, n_boot, seed):
        c = correlate(x[:, sample].mean(1), y[:, sample].mean(1), statistic)
        if c.value is None:
            undefined += 1
        else:
            values.append(c.value)
    if not values:
        return {"point": point, "low": None, "high": None, "undefined_resamples": undefined}
    low, high = np.quantile(values, [(1 - level) / 2, 1 - (1 - level) / 2])
    return {"point": point, "low": float(low), "high": float(high), "undefined_resamples": undefined,
            "methods": len(means_x), "users": len(users), "level": level}
