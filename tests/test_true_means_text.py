"""How a report words a result of analysis/true_correlation.py: an interval, no information, or no fit.

    pytest tests/test_true_means_text.py
"""

from __future__ import annotations

import numpy as np

from persalign.analysis.true_correlation import true_correlation
from persalign.report.cell_text import true_means_text
from tests.test_true_correlation import simulated_rows


def test_an_interval_that_spans_every_correlation_is_said_to_carry_no_information():
    """On the news study policy accuracy vs ROUGE-1 over 7 distinct deployments kept every ρ: "+0.39 [-1.00, +1.00]"
    read as an estimate; the text says what it is."""
    result = {"low": -1.0, "high": 1.0, "point": 0.39, "reliability": {"x": 0.85, "y": 0.5}, "methods": 11,
              "distinct_methods": 7, "noise_correlation": 0.1}
    text = true_means_text(result)
    assert "no information (every correlation from -1 to +1 fits the data" in text and "+0.39" not in text
    assert "7 distinct of 11 methods" in text
    assert "[+0.10, +0.90]" in true_means_text({**result, "low": 0.1, "high": 0.9})


def test_a_study_no_correlation_fits_is_not_called_too_noisy():
    """Every candidate ρ rejected is an empty confidence set (up to 1.9 % of the coverage simulations' studies): the
    data are more extreme than any true correlation allows with this noise. faf7942 printed it as "too noisy to tell
    (no correlation fits the data; ≈ 20 users would make it estimable)" beside reliabilities 0.45 / 0.51."""
    rng = np.random.default_rng(3)
    for _ in range(41):  # the 41st study drawn from seed 3 is one no ρ fits (found by search)
        x, y = simulated_rows(rng, 10, 0.9, 0.5)
    result = true_correlation(x, y, "pearson")
    assert result["low"] is None and result["no_fit"] and min(result["reliability"].values()) > 0.4
    text = true_means_text(result)
    assert text.startswith("true means: no correlation fits the data") and "nearest +1.00" in text
    assert "too noisy" not in text and "users would" not in text
