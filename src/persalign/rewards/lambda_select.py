"""Choosing the ARGS weight λ (paper appendix F.2).

Reward models trained the same way can converge to rewards of very different
magnitudes, so λ is chosen per trained model:

- `policy_accuracy` (TL;DR, PRISM): maximise policy accuracy of
  s_RGD(y|x) = Σ_t log π(y_t|x,y<t) + λ Σ_t r(y_t|x,y<t)   (Eq. 5-6)
  on the train users' held-out pairs. Vectorised over the whole grid at once.
- `harmonic` (Pref-LaMP-style data with user completions): maximise the
  harmonic mean of ROUGE-1, inverse perplexity (coherence) and policy
  accuracy on a validation set of held-out train-user items, generating with
  ARGS at each λ.

Ties go to the smallest λ (the least reward-driven choice).
"""

from __future__ import annotations

import numpy as np

from persalign.metrics.ranking import outcomes
from persalign.rewards.policy_scoring import s_rgd


def policy_accuracy_curve(lp_chosen, lp_rejected, r_chosen, r_rejected, lambdas) -> np.ndarray:
    """Strict policy accuracy (×100) of s_RGD for every λ in the grid (one row per λ)."""
    lam = np.asarray(lambdas, dtype=float)[:, None]
    s_w = s_rgd(np.asarray(lp_chosen)[None], np.asarray(r_chosen)[None], lam)
    s_l = s_rgd(np.asarray(lp_rejected)[None], np.asarray(r_rejected)[None], lam)
    return 100 * outcomes(s_w, s_l)[0].mean(axis=1)


def harmonic_mean(values) -> float:
    values = np.clip(np.asarray(values, dtype=float), 1e-9, None)
    return float(len(values) / np.sum(1.0 / values))


def best_lambda(lambdas, objective) -> tuple[float, int]:
    """(λ, index) maximising `objective`; the first (smallest-λ-in-order) wins ties."""
    order = np.argsort(lambdas, kind="stable")
    values = np.asarray(objective)[order]
    index = int(order[int(np.argmax(values))])
    return float(lambdas[index]), index
