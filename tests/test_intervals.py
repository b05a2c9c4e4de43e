"""Every interval a report prints covers what it states, checked by simulation at the sizes users run.

Means over users and paired differences (Hall's t): 93-97 % at 8, 13 and 30
users for normal, ROUGE-like and accuracy-like values; the percentile
bootstrap they replace covered 89 % at 8 users. Correlations across methods
(Fisher z): 93-97 % at 4 (Pearson), 6 (Kendall), 8 (Spearman) and 10 methods;
no interval below. Every interval stays inside the metric's range; no spread
means no interval and no power claim.
"""

import numpy as np
import pytest
from scipy import stats

from persalign.analysis.intervals import MIN_METHODS, correlation_interval, difference_interval, mean_interval
from persalign.analysis.power import detectable_difference, mean_detectable_difference, mean_users_needed, users_needed

SAMPLERS = {  # per-user values and their true mean
    "normal N(35, 15)": (lambda rng, n: rng.normal(35, 15, n), 35.0),
    "ROUGE-like 100·Beta(2, 4)": (lambda rng, n: 100 * rng.beta(2, 4, n), 100 / 3),
    "accuracy of 6 queries, p ~ Beta(8, 2)": (lambda rng, n: 100 * rng.binomial(6, rng.beta(8, 2, n)) / 6, 80.0),
}


def coverage(sampler, truth, users, repetitions=2000, seed=0, procedure=mean_interval, **kwargs) -> float:
    rng, covered, printed = np.random.default_rng(seed), 0, 0
    for _ in range(repetitions):
        result = procedure(sampler(rng, users), **kwargs)
        if result["low"] is not None:
            printed += 1
            covered += result["low"] <= truth <= result["high"]
    return covered / printed


@pytest.mark.slow
@pytest.mark.parametrize("users", [8, 13, 30])
@pytest.mark.parametrize("name", list(SAMPLERS))
def test_a_mean_over_users_covers_93_to_97_percent(name, users):
    sampler, truth = SAMPLERS[name]
    assert 0.93 <= coverage(sampler, truth, users) <= 0.97


def test_the_percentile_bootstrap_it_replaces_undercovers_at_8_users():
    rng, covered = np.random.default_rng(1), 0
    for _ in range(1000):
        values = rng.normal(35, 15, 8)
        draws = values[rng.integers(0, 8, (1000, 8))].mean(1)
        low, high = np.quantile(draws, [0.025, 0.975])
        covered += low <= 35 <= high
    assert covered / 1000 < 0.92


@pytest.mark.slow
@pytest.mark.parametrize("users", [8, 13, 30])
def test_a_paired_difference_covers_and_has_the_stated_power(users):
    """Δ vs greedy: skewed per-user differences; the stated detectable difference is found ≈ 80 % of the time."""
    sampler = lambda rng, n: rng.gamma(2, 4, n) - 8 + 3  # noqa: E731  mean 3, sd 5.7, right-skewed
    assert 0.93 <= coverage(sampler, 3.0, users, bounds=(-100, 100), procedure=difference_interval) <= 0.97
    rng, sd = np.random.default_rng(2), 6.0
    gap = mean_detectable_difference(sd, users)
    found = np.mean([(lambda r: r["low"] > 0)(difference_interval(rng.normal(gap, sd, users), (-100, 100)))
                     for _ in range(1500)])
    assert 0.75 <= found <= 0.85


def mostly_identical(rng, n):
    """Δ vs greedy where 60 % of users' outputs are identical (difference 0), the rest symmetric: no true Δ."""
    values = rng.normal(0, 10, n)
    values[rng.random(n) < 0.6] = 0.0
    return values


@pytest.mark.slow
@pytest.mark.parametrize("users", [8, 13, 16, 30])
def test_mostly_identical_outputs_give_at_most_5_percent_false_positives(users):
    """Hall's interval alone (the Δ column before, f3d1e41) read Δ ≠ 0 in 11-12 % of such null studies at 13-16
    users: one user's chance difference makes a sample skewness its correction follows."""
    false_positive = 1 - coverage(mostly_identical, 0.0, users, repetitions=3000, bounds=(-100, 100),
                                  procedure=difference_interval)
    assert false_positive <= 0.05
    if users in (13, 16):
        assert 1 - coverage(mostly_identical, 0.0, users, repetitions=3000, bounds=(-100, 100)) > 0.08  # Hall's


@pytest.mark.slow
@pytest.mark.parametrize("users", [8, 13, 30])
def test_a_difference_of_lognormal_values_keeps_its_coverage(users):
    """Per-user values lognormal (σ = 1) for both deployments: Hall's alone covered 91-93 %."""
    sampler = lambda rng, n: rng.lognormal(0, 1, n) - rng.lognormal(0, 1, n)  # noqa: E731
    covered = coverage(sampler, 0.0, users, repetitions=3000, bounds=(-100, 100), procedure=difference_interval)
    # at 8 users the union is conservative: 0.971 over 20,000 studies, 0.976 over these 3,000 (stated in the docs)
    assert 0.93 <= covered <= (0.98 if users == 8 else 0.97)


SKEWED_DIFFERENCES = {  # per-user Δ off the normal (issue #75) and its true mean
    "lognormal σ = 1, centred": (lambda rng, n: rng.lognormal(0, 1, n) - np.exp(0.5), 0.0),
    "lognormal σ = 0.75, centred": (lambda rng, n: rng.lognormal(0, 0.75, n) - np.exp(0.75 ** 2 / 2), 0.0),
    "60 % zero, the rest N(5, 10)": (lambda rng, n: np.where(rng.random(n) < 0.6, 0.0, rng.normal(5, 10, n)), 2.0),
}


@pytest.mark.slow
@pytest.mark.parametrize("users", [8, 13, 16, 29])
@pytest.mark.parametrize("name", list(SKEWED_DIFFERENCES))
def test_a_skewed_or_zero_inflated_difference_covers_93_to_97_percent(name, users):
    """The union of Hall's and t on n − 1 df with the plain g1 (before issue #75) covered 0.905 / 0.917 / 0.923
    / 0.929 on the centred lognormal σ = 1 at these users, and 0.911 on the zero-inflated shift at 8."""
    sampler, truth = SKEWED_DIFFERENCES[name]
    covered = coverage(sampler, truth, users, repetitions=4000, seed=users, bounds=(-100, 100),
                       procedure=difference_interval)
    assert 0.93 <= covered <= 0.97, covered


def test_intervals_never_leave_the_metric_range_and_say_why_when_absent():
    near_top = mean_interval([100, 100, 100, 100, 100, 100, 100, 50])
    assert near_top["high"] == 100.0 and near_top["low"] >= 0
    assert mean_interval([1, 0, 0, 0, 0, 0, 0, 0], bounds=(0, 100))["low"] == 0.0
    flat = mean_interval([100.0] * 10)
    assert flat["low"] is None and "same value" in flat["reason"]
    few = mean_interval([30.0, 40.0, 50.0])
    assert few["low"] is None and "needs 8" in few["reason"]


def test_no_spread_gives_no_power_claim():
    assert np.isnan(detectable_difference(0.0, 13)) and np.isnan(mean_detectable_difference(0.0, 13))
    assert users_needed(3.0, 0.0) is None and mean_users_needed(3.0, 0.0) is None


def test_the_users_needed_are_the_fewest_whose_interval_reaches_the_power():
    needed = mean_users_needed(3.0, 6.0)
    assert mean_detectable_difference(6.0, needed) <= 3.0 < mean_detectable_difference(6.0, needed - 1)
    assert needed >= users_needed(3.0, 6.0)  # the skewness correction only costs power


def correlation_coverage(statistic: str, methods: int, rho: float, repetitions: int = 1500) -> float:
    rng, covered = np.random.default_rng(3), 0
    truth = {"pearson": rho, "spearman": 6 / np.pi * np.arcsin(rho / 2), "kendall": 2 / np.pi * np.arcsin(rho)}
    compute = {"pearson": stats.pearsonr, "spearman": stats.spearmanr, "kendall": stats.kendalltau}[statistic]
    for _ in range(repetitions):
        x = rng.multivariate_normal([0, 0], [[1, rho], [rho, 1]], methods)
        result = correlation_interval(statistic, float(compute(x[:, 0], x[:, 1])[0]), methods)
        covered += result["low"] <= truth[statistic] <= result["high"]
    return covered / repetitions


@pytest.mark.parametrize("statistic,methods", [("pearson", 4), ("kendall", 6), ("spearman", 8), ("pearson", 10),
                                               ("kendall", 10), ("spearman", 10)])
@pytest.mark.slow
@pytest.mark.parametrize("rho", [0.0, 0.5])
def test_a_correlation_across_methods_covers_93_to_97_percent(statistic, methods, rho):
    assert 0.93 <= correlation_coverage(statistic, methods, rho) <= 0.97


def test_below_the_methods_a_statistic_needs_no_interval_is_printed_and_the_reason_says_so():
    for statistic, needed in MIN_METHODS.items():
        result = correlation_interval(statistic, 0.4, needed - 1)
        assert result["low"] is None and f"{needed} needed" in result["reason"]
    assert correlation_interval("kendall", 1.0, 10)["high"] <= 1.0
