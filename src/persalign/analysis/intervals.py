"""The intervals a report prints, each a procedure whose coverage is measured by simulation (tests/test_intervals.py).

- A mean over users (a deployment's ROUGE-1, policy accuracy, ...) and a paired
  difference over users (Δ vs greedy): Hall's (1992) skewness-corrected t
  interval. The plain t interval covers 90-93 % when per-user values are skewed
  (ROUGE-like gamma, accuracies near 100 %) and the percentile bootstrap 78 % at
  4 users and 89 % at 8; Hall's covers 94-96 % at 8, 13 and 30 users in the
  same simulations (docs/design-notes.md has the table). It is clipped to the
  metric's range (the true mean lies inside it, so clipping loses no coverage).
  Every user equal (sd = 0) gives no interval: no spread can be estimated.
- A paired difference vs greedy (the verdict's Δ column, `difference_interval`): the union of
  Hall's and the t interval, both on a tail-matched t where some users' Δ is exactly 0
  (degrees of freedom from the sample's kurtosis: the spread rests on the others) and Hall's on the
  small-sample skewness G1, inflated by (1 + 4/n) (skewed differences whose sample missed the
  tail read as nearly symmetric). The plain union covered 90-93 % on lognormal differences
  at 8-29 users and 91 % on zero-inflated shifted ones at 8; Hall's alone gave 11 % false
  positives when most users' outputs are identical (docs/design-notes.md has the tables).
- A correlation across methods (Tables 2, 5, 6): the methods are the sample
  (the question is whether, across methods, one metric predicts another), so
  the interval is Fisher's z with each statistic's standard error: Pearson
  1/√(k-3), Spearman √((1+ρ²/2)/(k-3)) (Bonett & Wright 2000), Kendall
  √(0.437/(k-4)) (Fieller, Hartley & Pearson 1957). Below MIN_METHODS no
  interval is printed: measured coverage leaves 93-97 % there (Kendall at 5
  methods: 87 %). Resampling users, as before, covered 52-84 %: it holds the
  methods fixed and cannot see that their ranking would change with others.

    python -c "from persalign.analysis.intervals import mean_interval; print(mean_interval([31, 45, 38, 52, 29, 40]))"
"""

from __future__ import annotations

import numpy as np
from scipy import stats

from persalign.core.user_needs import MIN_METHODS, MIN_USERS  # noqa: F401  (the sizes each interval is checked at)

MEAN_PROCEDURE = "Hall's skewness-corrected t over users"
DIFFERENCE_PROCEDURE = ("union of Hall's (skewness G1 (1 + 4/n)) and the t interval over users, kurtosis-matched "
                        "df where some users' Δ is 0")
SKEW_INFLATION_USERS = 4.0  # Hall's skewness for Δ: G1 · (1 + 4/n). G1 of a skewed sample is biased low at 8-30
# users (lognormal σ = 1: the misses are the samples that missed the tail, all on the high side); with 4 lognormal,
# gamma, zero-inflated and normal Δ cover 93-97 % at 8, 13, 16 and 29 users (a flat ×1.4: gamma 0.967 at 29 users;
# G1 · (1 + 3.2/n): lognormal 0.934 at 8; design-notes.md "Δ off the normal")
CORRELATION_PROCEDURE = "Fisher z across methods"
PERCENT = (0.0, 100.0)


def no_interval(mean: float, n: int, reason: str, level: float = 0.95) -> dict:
    return {"mean": mean, "low": None, "high": None, "level": level, "n": n, "reason": reason}


def why_none(interval: dict) -> str:
    """Why a mean has no interval, in a table cell's few words."""
    return f"{interval['n']} users" if interval["n"] < MIN_USERS else "every user equal"


def hall_bounds(values: np.ndarray, level: float, skew=None, df=None) -> tuple[np.ndarray, np.ndarray]:
    """Hall's transformation of the t statistic, inverted (Hall 1992, Zhou & Dinh 2005); rows of `values`
    (the last axis: users) each get their own interval. `skew` (default: the sample's g1) and `df` (default
    n − 1): per row, where a caller corrects them."""
    n = values.shape[-1]
    mean = values.mean(-1)
    se = values.std(-1, ddof=1) / np.sqrt(n)
    skew = stats.skew(values, axis=-1, bias=True) if skew is None else skew
    quantile = stats.t.ppf(1 - (1 - level) / 2, n - 1 if df is None else df)
    a = skew / np.sqrt(n)
    symmetric = np.abs(a) < 1e-6  # g is the identity there; the formula would lose its digits
    safe = np.where(symmetric, 1.0, a)

    def inverse(z):  # g⁻¹ for g(T) = T + aT²/3 + a²T³/27 + a/6
        return np.where(symmetric, z, (3 / safe) * (np.cbrt(1 + safe * (z - safe / 6)) - 1))

    return mean - se * inverse(quantile), mean - se * inverse(-quantile)


def mean_interval(values, bounds: tuple[float, float] = PERCENT, level: float = 0.95) -> dict:
    """Mean of per-user values with its interval, clipped to `bounds`; no interval below MIN_USERS or at sd = 0."""
    values = np.asarray(values, dtype=float)
    n = len(values)
    mean = float(values.mean()) if n else float("nan")
    if n < MIN_USERS:
        return no_interval(mean, n, f"{n} user{'s' if n != 1 else ''}: an interval needs {MIN_USERS} or more", level)
    if np.ptp(values) == 0:
        return no_interval(mean, n, f"all {n} users have the same value: no spread to estimate", level)
    low, high = (float(v) for v in hall_bounds(values, level))
    return {"mean": mean, "low": float(max(bounds[0], low)), "high": float(min(bounds[1], high)), "level": level,
            "n": n, "sd": float(values.std(ddof=1)), "procedure": MEAN_PROCEDURE, "reason": None}


def tail_df(values: np.ndarray) -> np.ndarray:
    """Degrees of freedom for a Δ row: n − 1, or where some users' Δ is exactly 0 (their outputs identical to the
    baseline's, so the spread rests on the others) those of a χ² whose variance matches the sample variance's,
    2 / (2/(n − 1) + G2⁺/n), G2 the bias-corrected excess kurtosis. On zero-inflated shifted Δ n − 1 covered 91 %
    at 8 users; applied to every row it overcovered symmetric heavy tails, where t is already conservative (a
    difference of two lognormals: 0.982 at 8 users)."""
    n = values.shape[-1]
    kurtosis = np.nan_to_num(stats.kurtosis(values, axis=-1, bias=False), nan=0.0)
    matched = 2 / (2 / (n - 1) + np.maximum(kurtosis, 0.0) / n)
    return np.where((values == 0).any(-1), matched, n - 1.0)


def inflated_skew(values: np.ndarray) -> np.ndarray:
    """The small-sample skewness G1 = g1 √(n(n − 1)) / (n − 2), inflated by (1 + SKEW_INFLATION_USERS / n)."""
    n = values.shape[-1]
    g1 = stats.skew(values, axis=-1, bias=True)
    return g1 * np.sqrt(n * (n - 1)) / (n - 2) * (1 + SKEW_INFLATION_USERS / n)


def difference_rows_bounds(values: np.ndarray, level: float) -> tuple[np.ndarray, np.ndarray]:
    """(low, high) of the Δ interval for each row of `values` (users on the last axis), unclipped: the union of
    Hall's on the inflated G1 and the t interval, both at `tail_df`."""
    n, df = values.shape[-1], tail_df(values)
    half = stats.t.ppf(1 - (1 - level) / 2, df) * values.std(-1, ddof=1) / np.sqrt(n)
    low, high = hall_bounds(values, level, skew=inflated_skew(values), df=df)
    return np.minimum(low, values.mean(-1) - half), np.maximum(high, values.mean(-1) + half)


def difference_interval(values, bounds: tuple[float, float], level: float = 0.95) -> dict:
    """A paired difference over users (Δ vs greedy): `difference_rows_bounds`, clipped to `bounds`. Hall's alone
    gave 11 % false positives at 13-16 users when most users' outputs are identical (differences 0 for 60 % of
    users, symmetric for the rest: ARGS at small λ): a chance skewness bends it, the t bounds hold there. The
    plain union undercovered skewed differences (lognormal: 90 % at 8 users); the tail-matched df and the
    inflated skewness hold both (tests/test_intervals.py, docs/design-notes.md "Δ off the normal")."""
    result = mean_interval(values, bounds, level)
    if result["low"] is None:
        return result
    low, high = (float(v) for v in difference_rows_bounds(np.asarray(values, dtype=float), level))
    return {**result, "low": float(max(bounds[0], low)), "high": float(min(bounds[1], high)),
            "procedure": DIFFERENCE_PROCEDURE}


def difference_bounds(bounds: tuple[float, float]) -> tuple[float, float]:
    """The range of a difference of two values in `bounds`."""
    width = bounds[1] - bounds[0]
    return -width, width


def correlation_interval(statistic: str, value: float | None, methods: int, level: float = 0.95) -> dict:
    """Fisher-z interval of a correlation across `methods`; no interval below MIN_METHODS (say why)."""
    if value is None:
        return {"low": None, "high": None, "reason": "the correlation is undefined"}
    needed = MIN_METHODS[statistic]
    if methods < needed:
        return {"low": None, "high": None,
                "reason": f"{methods} methods, {needed} needed for an interval that keeps its coverage"}
    r = float(np.clip(value, -1 + 1e-9, 1 - 1e-9))
    se = {"pearson": lambda: 1 / np.sqrt(methods - 3), "spearman": lambda: np.sqrt((1 + r * r / 2) / (methods - 3)),
          "kendall": lambda: np.sqrt(0.437 / (methods - 4))}[statistic]()
    z, quantile = np.arctanh(r), stats.norm.ppf(1 - (1 - level) / 2)
    low, high = float(np.tanh(z - quantile * se)), float(np.tanh(z + quantile * se))
    # at |r| = 1 the clipped r's interval would end a hair short of the point itself
    return {"low": min(low, value), "high": max(high, value), "reason": None, "procedure": CORRELATION_PROCEDURE}
