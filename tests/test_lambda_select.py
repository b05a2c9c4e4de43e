"""λ selection (appendix F.2) on hand-computed values."""

import numpy as np
import pytest

from persalign.decoders.args_lambda import best_lambda, harmonic_mean, policy_accuracy_curve


def test_policy_accuracy_curve_matches_hand_computation():
    # pair 1: L favours chosen, R against; pair 2: L against, R favours chosen
    lp_w, lp_l = [-1.0, -3.0], [-2.0, -2.0]
    r_w, r_l = [0.0, 2.0], [1.0, 0.0]
    curve = policy_accuracy_curve(lp_w, lp_l, r_w, r_l, [0.0, 0.6, 2.0])
    # λ=0: s_w-s_l = [1, -1] -> 50%; λ=0.6: [0.4, 0.2] -> 100%; λ=2: [-1, 3] -> 50%
    np.testing.assert_allclose(curve, [50.0, 100.0, 50.0])


def test_best_lambda_prefers_the_smallest_on_ties():
    assert best_lambda([3.0, 0.0, 1.0], [70.0, 70.0, 60.0]) == (0.0, 1)
    assert best_lambda([0.0, 1.0], [10.0, 20.0]) == (1.0, 1)


def test_harmonic_mean():
    assert harmonic_mean([0.5, 0.5, 0.5]) == pytest.approx(0.5)
    assert harmonic_mean([1.0, 0.25]) == pytest.approx(0.4)
    assert harmonic_mean([0.0, 1.0]) < 1e-6  # a zero component sinks the objective
