"""Correlations on hand-checked values, degenerate inputs, the correlation table, Finding 3 by hand."""

import pytest

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


def test_correlation_table_gives_the_point_and_an_interval_only_where_the_methods_suffice():
    from persalign.analysis.study import MethodResult, correlation_table

    users = [f"u{i}" for i in range(8)]

    def method(m):
        return MethodResult(f"M{m}", "p", {}, m, 1, {"rm_accuracy": {u: 50.0 + m + (i % 3) for i, u in enumerate(users)},
                                                    "policy_accuracy": {u: 60.0 - m + (i % 2) for i, u in enumerate(users)}})

    three = correlation_table([method(m) for m in range(3)], "rm_accuracy", "policy_accuracy")
    assert three["kendall"]["point"].value == pytest.approx(-1.0)
    assert three["kendall"]["low"] is None and "6 needed" in three["kendall"]["reason"]
    ten = correlation_table([method(m) for m in range(10)], "rm_accuracy", "policy_accuracy")
    assert -1.0 <= ten["kendall"]["low"] <= ten["kendall"]["point"].value <= ten["kendall"]["high"] <= 1.0
    assert ten["pearson"]["methods"] == 10 and ten["pearson"]["users"] == 8


def test_finding3_measures_each_user_with_winners_chosen_on_the_other_half_by_hand():
    """The vectorised cross-fitting equals a plain loop over the same splits: for every split and each half,
    choose both winners on one half's means and measure them on the other half's users."""
    import numpy as np

    from persalign.analysis.paired import SPLITS, crossfit_means, split_masks

    rng = np.random.default_rng(5)
    values = 20 + rng.normal(0, 3, (4, 9))
    is_icl = np.array([True, False, True, False])
    everyone = np.arange(9)[None]
    masks = split_masks(everyone, 9, SPLITS, np.random.default_rng(0))
    got, chosen = crossfit_means(values, values, is_icl, everyone, masks)
    by_hand, picks = [], []
    for first in masks[0]:
        differences = np.empty(9)
        for choose_on, measure_on in ((first, ~first), (~first, first)):
            means = values[:, choose_on].mean(1)
            icl = max((0, 2), key=lambda m: means[m])
            reward = max((1, 3), key=lambda m: means[m])
            differences[measure_on] = values[icl, measure_on] - values[reward, measure_on]
            picks.append((icl, reward))
        assert abs(int(first.sum()) - 9 / 2) <= 0.5
        by_hand.append(differences.mean())
    assert got[0] == pytest.approx(np.mean(by_hand))
    assert sorted(map(tuple, chosen[0].tolist())) == sorted(picks)
