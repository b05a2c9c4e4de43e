"""Power of a paired comparison over users: the smallest difference it detects and the users a gap needs.

Finding 3's cross-fitted difference is, once its winners are fixed, a mean of
per-user differences with a t-type interval over all n users, so its power is
that of the two-sided paired t-test at n users (noncentral t; tests/test_paired.py
checks it against the procedure by simulation). The paired Δ vs greedy gets
the union of Hall's skewness-corrected interval and the t interval, which costs
power at few users, so its detectable difference is simulated for that interval
(`mean_detectable_difference`);
tests/test_intervals.py checks both find the stated difference 75-85 % of the
time. A spread of 0 gives no power claim: a sample in which every user differs by
the same amount says nothing about the spread of the users to come.

    python -c "from persalign.analysis.power import detectable_difference as d; print(d(5.0, 13))"
"""

from __future__ import annotations

from functools import cache

import numpy as np
from scipy import optimize, stats

POWER, ALPHA, DEFAULT_GAP = 0.8, 0.05, 3.0


def power_of(gap: float, sd: float, users: int, alpha: float = ALPHA) -> float:
    """Power of the two-sided paired t-test to detect a true mean difference `gap`; nan where undefined."""
    if users < 2 or not sd > 0:
        return float("nan")
    df, shift = users - 1, abs(gap) * np.sqrt(users) / sd
    if shift > 100:  # beyond scipy's noncentral t: certain detection
        return 1.0
    critical = stats.t.ppf(1 - alpha / 2, df)
    wrong_side = float(np.nan_to_num(stats.nct.cdf(-critical, df, shift)))  # scipy: nan where it underflows
    return float(stats.nct.sf(critical, df, shift)) + wrong_side


def detectable_difference(sd: float, users: int, power: float = POWER, alpha: float = ALPHA) -> float:
    """The smallest true difference detected with `power` by `users` paired differences of spread `sd`;
    nan for fewer than 2 users or no spread."""
    if users < 2 or not sd > 0:
        return float("nan")
    high = sd
    while power_of(high, sd, users, alpha) < power:
        high *= 2
    return float(optimize.brentq(lambda gap: power_of(gap, sd, users, alpha) - power, 0.0, high, xtol=1e-9))


def users_needed(gap: float, sd: float, power: float = POWER, alpha: float = ALPHA, most: int = 100_000) -> int | None:
    """The fewest users whose paired differences (spread `sd`) detect `gap` with `power`; None past `most`
    or where no spread is known."""
    if not sd > 0 or gap == 0:
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


SIMULATED_USERS = 200  # above this Hall's correction vanishes and the noncentral t is used
DRAWS = 4000


@cache
def _hall_shortfall(users: int, power: float, alpha: float) -> float:
    """The detectable difference of the Δ interval (the union of Hall's and the t interval,
    intervals.difference_interval) per unit sd, simulated for normal per-user differences.

    The interval is location-equivariant, so with draws z (sd 1) it excludes 0 at a true difference g
    exactly when g > -low(z): the difference found with `power` is that quantile of -low(z)."""
    from persalign.analysis.intervals import difference_rows_bounds

    z = np.random.default_rng(users).normal(0, 1, (DRAWS, users))
    low, _ = difference_rows_bounds(z, 1 - alpha)
    return float(np.quantile(-low, power))


def mean_detectable_difference(sd: float, users: int, power: float = POWER, alpha: float = ALPHA) -> float:
    """`detectable_difference` for the interval a paired difference over users actually gets (Hall's t ∪ t,
    analysis/intervals.py): simulated up to SIMULATED_USERS users (at 8 users the skewness correction
    costs power: the t-test's detectable difference is found 74 % of the time, not 80 %)."""
    from persalign.analysis.intervals import MIN_USERS

    if users < MIN_USERS or not sd > 0:
        return float("nan")
    plain = detectable_difference(sd, users, power, alpha)
    if users > SIMULATED_USERS:
        return plain
    return max(plain, sd * _hall_shortfall(users, power, alpha))  # below the t-test's is simulation noise


def mean_users_needed(gap: float, sd: float, power: float = POWER, alpha: float = ALPHA) -> int | None:
    """The fewest users whose Δ interval detects `gap` with `power` (None where no spread is known)."""
    from persalign.analysis.intervals import MIN_USERS

    plain = users_needed(gap, sd, power, alpha)
    if plain is None or plain > SIMULATED_USERS:
        return plain
    users = max(plain, MIN_USERS)  # the correction only costs power: start from the t-test's answer
    while users <= SIMULATED_USERS and mean_detectable_difference(sd, users, power, alpha) > abs(gap):
        users += 1
    return users if users <= SIMULATED_USERS else users_needed(gap, sd, power, alpha)
