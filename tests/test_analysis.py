"""Correlations on hand-checked values, degenerate inputs, reproducible bootstrap."""

import pytest

from persalign.analysis.bootstrap import correlation_ci, metric_ci
from persalign.analysis.correlations import correlate, correlate_all


def test_correlations_on_hand_checked_values():
    # x = 1..4, y = 1,3,2,4: one discordant pair of six -> tau = (5-1)/6
    result = correlate_all([1, 2, 3, 4], [1, 3, 2, 4])
    assert result["kendall"].value == pytest.approx(4 / 6)
    assert result["spearman"].value == pytest.approx(0.8)
    assert result["pearson"].value == pytest.approx(0.8)


def test_ties_are_handled_by_tau_b():
    # x has a tie; tau-b = (C - D) / sqrt((n0 - n1)(n0 - n2)) = (5 - 0) / sqrt(5 * 6)
    assert correlate([1, 1, 2, 3], [1, 2, 3, 4], "kendall").value == pytest.approx(5 / (30 ** 0.5))


def test_ties_hidden_by_float_rounding_are_still_ties():
    # 0.1 + 0.2 != 0.3 in floats; the same accuracy reached by different sums must tie (tau-b as above)
    assert 0.1 + 0.2 != 0.3
    assert correlate([0.3, 0.1 + 0.2, 2, 3], [1, 2, 3, 4], "kendall").value == pytest.approx(5 / (30 ** 0.5))
    assert correlate([0.3, 0.1 + 0.2, 2, 3], [1, 2, 3, 4], "spearman").value == pytest.approx(
        correlate([1, 1, 2, 3], [1, 2, 3, 4], "spearman").value)
    assert correlate([1.0, 1.0 + 1e-6, 2, 3], [1, 2, 3, 4], "kendall").value == pytest.approx(1.0)  # real gap


def test_constant_or_too_few_inputs_say_why_instead_of_nan():
    constant = correlate([1, 2, 3], [5, 5, 5])
    assert constant.value is None and "constant" in constant.reason and "n/a" in str(constant)
    few = correlate([1, 2], [2, 1])
    assert few.value is None and "at least 3" in few.reason


def test_bootstrap_is_reproducible_and_contains_the_mean():
    means = {f"u{i}": float(i) for i in range(10)}
    a, b = metric_ci(means, n_boot=500, seed=3), metric_ci(means, n_boot=500, seed=3)
    assert a == b and a["low"] < a["mean"] < a["high"]
    assert metric_ci(means, n_boot=500, seed=4) != a


def test_correlation_ci_with_few_methods_is_wide_and_counts_undefined_resamples():
    users = [f"u{i}" for i in range(8)]
    x = [{u: m + 0.5 * (i % 3) for i, u in enumerate(users)} for m in range(3)]
    y = [{u: (2 - m) + 0.3 * (i % 2) for i, u in enumerate(users)} for m in range(3)]
    ci = correlation_ci(x, y, "kendall", n_boot=200, seed=0)
    assert ci["point"].value == pytest.approx(-1.0)
    assert ci["methods"] == 3 and ci["low"] <= ci["point"].value <= ci["high"]
    assert ci == correlation_ci(x, y, "kendall", n_boot=200, seed=0)


def test_finding3_chooses_both_bests_on_one_half_of_the_users_and_measures_them_on_the_other():
    """Two reward methods of equal quality whose ranking differs between the halves: each half's users are
    measured with the winners chosen on the OTHER half (analysis/paired.py), by hand here."""
    import numpy as np

    from persalign.analysis.paired import halves
    from persalign.analysis.study import MethodResult, best_minus_best

    users = [f"u{i}" for i in range(8)]
    rng = np.random.default_rng(5)

    def method(label, kind, values):
        result = MethodResult(label, "p", kind, 0, 1)
        result.user_means["rouge1"] = dict(zip(users, values))
        return result

    icl = method("ICL", "icl", 20 + rng.normal(0, 1, 8))
    a, b = method("A", "args", 15 + rng.normal(0, 3, 8)), method("B", "args", 15 + rng.normal(0, 3, 8))
    got = best_minus_best([icl], [a, b], "rouge1", seed=0)
    x = {m.label: np.array([m.user_means["rouge1"][u] for u in users]) for m in (icl, a, b)}
    differences, chosen = np.empty(8), []
    for choose_on, measure_on in ((lambda h: (h[0], h[1]))(halves(8, 0)), (lambda h: (h[1], h[0]))(halves(8, 0))):
        best = "A" if x["A"][choose_on].mean() >= x["B"][choose_on].mean() else "B"
        differences[measure_on] = x["ICL"][measure_on] - x[best][measure_on]
        chosen.append(("ICL", best))
    assert got["mean"] == pytest.approx(differences.mean())
    assert got["chosen"] == chosen and "cross-fitted" in got["selection"]
    assert got["low"] < got["mean"] < got["high"] and got["users"] == 8