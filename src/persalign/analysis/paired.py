"""Finding 3's paired comparison, made honest: cross-fitted "best vs best", a t interval, and its power.

"Best ICL variant − best reward method" picks both winners by ROUGE-1. Picking
and measuring on the same users biases the difference toward the winners and
makes any interval too narrow (a null simulation: 18 % of 95 % intervals
excluded 0 when the choice was repeated inside every bootstrap resample).
Cross-fitting removes that: the users are cut into two halves (seeded); the
winners are chosen on one half and measured on the other, then the halves
swap. Each user's difference d_u = value(ICL*, u) − value(RM*, u) uses winners
chosen WITHOUT that user, so under the null E[d_u] = 0 whatever was chosen.

The interval: each half's paired t interval on its d_u, averaged (centre and
half-width, weighted by the halves' sizes for the centre). The two halves'
means are positively correlated (a method that wins on one half and does well
on the other tends to be chosen on both), so the plain t interval over all d_u
is too narrow (9 % false positives at a nominal 5 % in the null simulation);
the averaged half-width is valid for any correlation between the halves (the
sd of a sum is at most the sum of the sds), at the price of being
conservative. Each half needs 2 users, so fewer than 4 users give no interval.

Power, for the same procedure (a paired t-test on half the users, which is
what the averaged half-width amounts to): the smallest difference detected
with 80 % power at α = 0.05 (two-sided, noncentral t), and the number of users
needed to detect a given gap (default 3 ROUGE-1 points, the paper's
ICL-vs-RM gap at 7B). tests/test_paired.py checks the false-positive rate on
null simulations and the power on shifted ones.

    python -c "from persalign.analysis.paired import detectable_difference as d; print(d(5.0, 13))"
"""

from __future__ import annotations

import numpy as np
from scipy import optimize, stats

PROCEDURE = ("cross-fitted: both winners chosen by ROUGE-1 on one half of the users and measured on the "
             "other, then the halves swapped; the halves' paired t intervals averaged")
POWER, ALPHA, DEFAULT_GAP = 0.8, 0.05, 3.0


def power_of(gap: float, sd: float, users: int, alpha: float = ALPHA) -> float:
    """Power of the two-sided paired t-test to detect a true mean difference `gap`."""
    if users < 2 or not sd >= 0:
        return float("nan")
    if sd == 0 or abs(gap) * np.sqrt(users) / sd > 100:  # beyond scipy's noncentral t: certain detection
        return 1.0 if gap else alpha
    df, shift = users - 1, abs(gap) * np.sqrt(users) / sd
    critical = stats.t.ppf(1 - alpha / 2, df)
    wrong_side = float(np.nan_to_num(stats.nct.cdf(-critical, df, shift)))  # scipy: nan where it underflows
    return float(stats.nct.sf(critical, df, shift)) + wrong_side


def detectable_difference(sd: float, users: int, power: float = POWER, alpha: float = ALPHA) -> float:
    """The smallest true difference detected with `power` by `users` paired differences of spread `sd`."""
    if users < 2 or not sd >= 0:
        return float("nan")
    if sd == 0:  # every user differs by the same amount: any true difference is detected
        return 0.0
    high = sd
    while power_of(high, sd, users, alpha) < power:
        high *= 2
    return float(optimize.brentq(lambda gap: power_of(gap, sd, users, alpha) - power, 0.0, high, xtol=1e-9))


def users_needed(gap: float, sd: float, power: float = POWER, alpha: float = ALPHA, most: int = 100_000) -> int | None:
    """The fewest users whose paired differences (spread `sd`) detect `gap` with `power`; None past `most`."""
    if not sd >= 0 or gap == 0:
        return None
    low, high = 2, 2
    while power_of(gap, sd, high, alpha) < power:
        if high >= most:
            return None
        low, high = high, min(most, high * 2)
    while low < high:  # power grows with the number of users: bisect for the first that reaches it
        middle = (low + high) // 2
        low, high = (middle + 1, high) if power_of(gap, sd, middle, alpha) < power else (low, middle)
    return high


def halves(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    order = np.random.default_rng(seed).permutation(n)
    return np.sort(order[: n // 2]), np.sort(order[n // 2:])


def crossfit_differences(select: np.ndarray, value: np.ndarray, is_icl: np.ndarray, seed: int):
    """Per-user differences with winners chosen on the other half; and the (ICL, reward) rows chosen per half.

    `select` and `value` are (methods, users): the selection metric (ROUGE-1) and the compared metric.
    """
    differences = np.empty(select.shape[1])
    chosen = []
    first, second = halves(select.shape[1], seed)
    for choose_on, measure_on in ((first, second), (second, first)):
        means = select[:, choose_on].mean(1)
        best_icl = np.flatnonzero(is_icl)[np.argmax(means[is_icl])]
        best_reward = np.flatnonzero(~is_icl)[np.argmax(means[~is_icl])]
        differences[measure_on] = value[best_icl, measure_on] - value[best_reward, measure_on]
        chosen.append((int(best_icl), int(best_reward)))
    return differences, chosen


def t_interval(differences: np.ndarray, level: float = 0.95) -> tuple[float, float, float]:
    """(mean, half-width, sd) of the paired t interval; one user gives an infinite half-width."""
    n, mean = len(differences), float(np.mean(differences))
    if n < 2:
        return mean, float("inf"), float("nan")
    sd = float(np.std(differences, ddof=1))
    return mean, float(stats.t.ppf(1 - (1 - level) / 2, n - 1)) * sd / np.sqrt(n), sd


def crossfit_comparison(select: np.ndarray, value: np.ndarray, is_icl: np.ndarray, seed: int = 0,
                        level: float = 0.95, gap: float = DEFAULT_GAP) -> dict | None:
    """Cross-fitted best-ICL − best-reward difference with its interval and power; None below 2 users.

    Below 4 users a half has one user: the point estimate stands, the interval is None (undefined).
    """
    if select.shape[1] < 2 or not is_icl.any() or is_icl.all():
        return None
    differences, chosen = crossfit_differences(select, value, is_icl, seed)
    parts = [t_interval(differences[half], level) for half in halves(len(differences), seed)]
    sizes = [len(half) for half in halves(len(differences), seed)]
    mean = float(np.mean(differences))
    half_width = float(np.mean([width for _, width, _ in parts]))
    sd = float(np.std(differences, ddof=1)) if len(differences) > 1 else float("nan")
    measured_on = min(sizes)
    needed = users_needed(gap, sd) if measured_on > 1 else None
    low, high = (mean - half_width, mean + half_width) if np.isfinite(half_width) else (None, None)
    return {"mean": mean, "low": low, "high": high, "level": level, "sd": sd,
            "users": len(differences), "chosen": chosen, "selection": PROCEDURE,
            "detectable": detectable_difference(sd, measured_on) if measured_on > 1 else float("nan"), "gap": gap,
            "users_needed": None if needed is None else 2 * needed}
