"""Finding 3's comparison: best ICL variant − best reward method, cross-fitted over many splits, bootstrapped whole.

"Best ICL variant − best reward method" picks both winners by ROUGE-1. Picking
and measuring on the same users biases the difference toward the winners
(18 % of null 95 % intervals excluded 0). Cross-fitting removes that: the
users are cut into two halves, the winners chosen on one half are measured on
the other, then the halves swap, so under the null E[d_u] = 0 whatever was
chosen. One split is a coin toss of its own, so the estimate is the mean over
SPLITS seeded splits.

The interval: the halves' means are correlated (a choice made on one half
rides on the data that half is measured with), so neither a t interval over
all users (91-92 % coverage, 8-10 % null false positives) nor the earlier
average of the halves' t half-widths (98-99.8 %, conservative) states what it
claims. The whole procedure (splits, choices, measurement) is bootstrapped
over users, a resampled user always in one half, and the interval is
mean ± t(n-1) · se_boot · √(n/(n-1)), clipped to the metric's range. In
tests/test_intervals.py's simulation it excludes 0 in at most 4 % of null
repetitions and covers 95-98 % where the winners are clear, with the power of
a paired t-test over all users (the earlier interval had that of half of them).
The spread implied by se_boot gives the detectable difference and the users a
gap needs (analysis/power.py). Below MIN_USERS no interval is printed.

    python -c "import numpy as np; from persalign.analysis.paired import crossfit_comparison as c; \\
x = np.random.default_rng(0).normal(30, 5, (4, 16)); x[0] += 6; print(c(x, x, np.array([1, 1, 0, 0], bool)))"
"""

from __future__ import annotations

from collections import Counter

import numpy as np
from scipy import stats

from persalign.analysis.power import DEFAULT_GAP, detectable_difference, users_needed
from persalign.core.user_needs import MIN_PAIRED_USERS

SPLITS, RESAMPLES = 20, 400
MIN_USERS = MIN_PAIRED_USERS  # null false positives and coverage checked from here (tests/test_intervals.py)
PROCEDURE = (f"cross-fitted over {SPLITS} random halvings (winners chosen by ROUGE-1 on one half of the users, "
             f"measured on the other, then swapped), the whole procedure bootstrapped over users "
             f"({RESAMPLES} resamples)")


def split_masks(samples: np.ndarray, users: int, splits: int, rng: np.random.Generator) -> np.ndarray:
    """(resamples, splits, n) booleans, True = first half, for rows of user indices `samples` (resamples, n).

    Each split halves the DISTINCT users of a resample (a resampled user's copies share a half, so no user
    is chosen on and measured on): every user gets a random key, and the lower half of the present keys
    form the first half.
    """
    present = np.zeros((len(samples), users), bool)
    np.put_along_axis(present, samples, True, axis=1)
    keys = np.where(present[:, None, :], rng.random((len(samples), splits, users)), np.inf)
    distinct = present.sum(1)
    threshold = np.take_along_axis(np.sort(keys, -1), (distinct // 2 - 1)[:, None, None], -1)
    first = keys <= threshold  # (resamples, splits, users)
    return np.take_along_axis(first, np.broadcast_to(samples[:, None, :], (len(samples), splits,
                                                                                samples.shape[1])), -1)


def crossfit_means(select: np.ndarray, value: np.ndarray, is_icl: np.ndarray, samples: np.ndarray, masks):
    """The cross-fitted difference averaged over splits, per resample (`samples`, `masks` from split_masks);
    and the (ICL, reward) rows each half-split chose."""
    icl, reward = np.flatnonzero(is_icl), np.flatnonzero(~is_icl)
    chosen_values = value.T[samples]  # (resamples, n, methods)
    chosen_select = select.T[samples]
    total, chosen = np.zeros(len(samples)), []
    for choose_on in (masks, ~masks):
        means = np.einsum("bnm,bsn->bsm", chosen_select, choose_on / choose_on.sum(-1, keepdims=True))
        best_icl, best_reward = icl[means[..., icl].argmax(-1)], reward[means[..., reward].argmax(-1)]  # (b, s)
        pick = lambda rows: np.take_along_axis(chosen_values[:, None], rows[..., None, None], -1)[..., 0]  # noqa: E731
        total += ((pick(best_icl) - pick(best_reward)) * ~choose_on).sum((1, 2))
        chosen.append(np.stack([best_icl, best_reward], -1))
    return total / (masks.shape[1] * samples.shape[1]), np.concatenate(chosen, 1)


def bootstrap_se(select, value, is_icl, rng, resamples: int = RESAMPLES) -> float:
    """Standard error of the whole procedure over resampled users (each resample split SPLITS times);
    resamples with a single distinct user (no halves) are left out."""
    users = select.shape[1]
    samples = rng.integers(0, users, (resamples, users))
    samples = samples[(samples != samples[:, :1]).any(1)]
    draws, _ = crossfit_means(select, value, is_icl, samples, split_masks(samples, users, SPLITS, rng))
    return float(np.std(draws, ddof=1) * np.sqrt(users / (users - 1)))


def crossfit_comparison(select: np.ndarray, value: np.ndarray, is_icl: np.ndarray, seed: int = 0,
                        level: float = 0.95, bounds=(-100.0, 100.0)) -> dict | None:
    """Cross-fitted best-ICL − best-reward difference with its interval and power (users needed for a gap of
    DEFAULT_GAP points); None below 2 users.

    `select` and `value` are (methods, users): the selection metric (ROUGE-1) and the compared metric.
    `chosen`: the (ICL, reward) rows chosen, with the share of half-splits that chose them, most often first.
    """
    users = select.shape[1]
    if users < 2 or not is_icl.any() or is_icl.all():
        return None
    rng = np.random.default_rng(seed)
    everyone = np.arange(users)[None]
    means, picks = crossfit_means(select, value, is_icl, everyone, split_masks(everyone, users, SPLITS, rng))
    mean, picks = means[0], Counter(map(tuple, picks[0].tolist()))
    chosen = [(icl, reward, count / picks.total()) for (icl, reward), count in picks.most_common()]
    result = {"mean": float(mean), "low": None, "high": None, "level": level, "users": users, "chosen": chosen,
              "selection": PROCEDURE, "gap": DEFAULT_GAP, "sd": float("nan"), "detectable": float("nan"),
              "users_needed": None, "reason": None}
    if users < MIN_USERS:
        result["reason"] = f"{users} users: the cross-fitted interval needs {MIN_USERS} or more"
        return result
    se = bootstrap_se(select, value, is_icl, rng)
    if not se > 0:
        result["reason"] = "every resample gives the same difference: no spread to estimate"
        return result
    half = float(stats.t.ppf(1 - (1 - level) / 2, users - 1)) * se
    sd = se * np.sqrt(users)  # the spread of per-user differences this standard error implies
    needed = users_needed(DEFAULT_GAP, sd)
    result.update(low=max(bounds[0], mean - half), high=min(bounds[1], mean + half), sd=sd,
                  detectable=detectable_difference(sd, users),
                  users_needed=None if needed is None else max(MIN_USERS, needed))
    return result


def simulated_power(gap: float, sd: float, users: int, methods: tuple[int, int] = (2, 4), repetitions: int = 200,
                    seed: int = 0) -> float:
    """Share of repetitions in which the procedure's interval excludes 0 when one ICL variant is truly `gap`
    better than a clear best reward method (the others 10 sd below), per-user differences of spread `sd`."""
    rng = np.random.default_rng(seed)
    n_icl, n_reward = methods
    is_icl = np.array([True] * n_icl + [False] * n_reward)
    truth = np.full(n_icl + n_reward, -10.0 * sd)
    truth[0], truth[n_icl] = gap, 0.0
    found = 0
    for repetition in range(repetitions):
        values = truth[:, None] + rng.normal(0, sd / np.sqrt(2), (n_icl + n_reward, users))
        result = crossfit_comparison(values, values, is_icl, seed=repetition)
        found += result["low"] is not None and (result["low"] > 0 or result["high"] < 0)
    return found / repetitions
