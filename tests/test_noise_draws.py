"""Noise draws whose spread varies as the real noise's (analysis/noise_draws.py).

    pytest tests/test_noise_draws.py
"""

from __future__ import annotations

import numpy as np

from persalign.analysis.noise_draws import damped, gram, gram_covariance

CONTRASTS, USERS, KAPPA = 19, 16, 0.3  # 20 methods over 16 users: the cells the resampled noise kept above the band


def user_rows(rng, users: int = USERS) -> np.ndarray:
    """(users, 2m) centred noise rows: each contrast's (x, y) pair of unit variance, correlated KAPPA."""
    e, f = rng.standard_normal((2, users, CONTRASTS))
    rows = np.concatenate([e, KAPPA * e + np.sqrt(1 - KAPPA ** 2) * f], 1)
    return rows - rows.mean(0)


def true_gram_covariance(users: int = USERS) -> np.ndarray:
    """Cov of (|e_x|², |e_y|², e_x·e_y) for the mean of `users` rows: m (Σ_ac Σ_bd + Σ_ad Σ_bc) / users²."""
    k = KAPPA
    return CONTRASTS * np.array([[2, 2 * k * k, 2 * k], [2 * k * k, 2, 2 * k], [2 * k, 2 * k, 1 + k * k]]) / users ** 2


def test_the_gram_covariance_estimate_is_unbiased_where_the_plain_one_is_not():
    rng = np.random.default_rng(0)
    pools = [user_rows(rng) for _ in range(400)]
    estimate = np.mean([gram_covariance(pool, CONTRASTS) for pool in pools], 0)
    truth = true_gram_covariance()
    assert np.allclose(np.diag(estimate), np.diag(truth), rtol=0.08), (np.diag(estimate), np.diag(truth))
    assert abs(estimate[0, 2] - truth[0, 2]) < 0.15 * truth[0, 2]
    # what resampling the users draws: the Gram of their plain covariance, wider (16 users, 38 dimensions)
    resampled = np.mean([np.cov(gram(*np.split(pool[rng.integers(0, USERS, (2000, USERS))].mean(1), 2, -1)).T)
                         for pool in pools[:40]], 0)
    assert resampled[0, 0] > 1.6 * truth[0, 0], (resampled[0, 0], truth[0, 0])  # 1.9x measured


def test_damped_draws_keep_their_mean_and_take_the_estimated_spread():
    rng = np.random.default_rng(1)
    pool = user_rows(rng)
    noise = pool[rng.integers(0, USERS, (4000, USERS))].mean(1)
    moved = damped(noise, pool)
    before, after = gram(*np.split(noise, 2, -1)), gram(*np.split(moved, 2, -1))
    assert np.allclose(after.mean(0), before.mean(0), rtol=0.05)
    target = gram_covariance(pool, CONTRASTS)
    assert np.allclose(np.diag(np.cov(after.T)), np.diag(target), rtol=0.1), (np.diag(np.cov(after.T)), np.diag(target))
    # each draw stays in the plane of its own (e_x, e_y): directions the users measured are kept
    x, y = np.split(noise, 2, -1)
    plane = np.stack([x, y], 1)  # (draws, 2, m)
    moved_x = np.split(moved, 2, -1)[0]
    coefficients = np.linalg.lstsq(plane[0].T, moved_x[0], rcond=None)[0]
    assert np.allclose(plane[0].T @ coefficients, moved_x[0])


def test_a_draw_with_no_noise_is_left_as_drawn_without_a_nan_or_a_warning():
    """Issue #74: a resampled draw whose users were all one (noise exactly 0) divided 0 by 0 (RuntimeWarning,
    a NaN inside the draws, tests/test_analysis.py). It is left as drawn: zero."""
    import warnings

    rng = np.random.default_rng(2)
    pool = user_rows(rng)
    noise = pool[rng.integers(0, USERS, (400, USERS))].mean(1)
    noise[:5] = 0.0  # five draws with no noise
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        moved = damped(noise, pool)
    assert np.isfinite(moved).all()
    assert (moved[:5] == 0).all()
