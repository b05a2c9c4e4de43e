"""How one table cell of a report reads: a mean with its 95 % interval (or why none), a correlation across
methods beside the correlation of their true means (analysis/true_correlation.py), a Best-of-N curve point.

    persalign report runs/demo          # every table's cells are written by these
"""

from __future__ import annotations

import math

from persalign.analysis.intervals import why_none
from persalign.analysis.true_correlation import MEASURED_NOISE_CORRELATION

SYMBOLS = {"pearson": "Pearson r", "spearman": "Spearman ρ", "kendall": "Kendall τ"}


def with_ci(ci: dict | None, digits: int = 2) -> str:
    if not ci or ci.get("mean") is None or math.isnan(ci["mean"]):
        return "-"
    if ci.get("low") is None:
        return f"{ci['mean']:.{digits}f} (no interval: {why_none(ci)})"
    return f"{ci['mean']:.{digits}f} [{ci['low']:.{digits}f}, {ci['high']:.{digits}f}]"


def curve_cell(curve: dict, name: str, n: int) -> str:
    """One Best-of-N curve's value at N (a dash where it was not measured or is NaN)."""
    value = curve.get(name, {}).get(str(n))
    return f"{value:.2f}" if value is not None and value == value else "-"


def correlation_cell(result: dict | None) -> str:
    if result is None:
        return "n/a (no methods with both metrics)"
    point = result["point"]
    if point.value is None:
        return f"n/a ({point.reason})"
    interval = "(no interval)" if result["low"] is None else f"[{result['low']:+.2f}, {result['high']:+.2f}]"
    return f"observed {point.value:+.2f} {interval} (n={point.n}); {true_means_text(result.get('true'))}"


def true_means_text(true: dict | None) -> str:
    """The correlation of the methods' true means, or why none can be stated (analysis/true_correlation.py)."""
    if not true:
        return "true means: not estimated"
    reliability = true.get("reliability")
    rel = f"reliability {reliability['x']:.2f} / {reliability['y']:.2f}" if reliability else ""
    if true["low"] is None and true.get("reliability") is None:  # too few users or methods to measure the noise
        return f"true means: no interval ({true['reason']})"
    if true.get("no_fit"):  # an empty confidence set: the data are more extreme than any ρ allows, not too noisy
        return (f"true means: no correlation fits the data (the observed one lies outside the central "
                f"{true.get('level', 0.95) * 100:.0f} % of what every true correlation gives with this noise; nearest "
                f"{true['point']:+.2f}; by chance in up to 2 % of the coverage simulations' studies; {rel}"
                f"{_merged(true)})")
    if true["low"] is None:
        users = ""
        if true.get("users_needed") and true.get("users_needed_is_bound"):
            users = (f"; at least {true['users_needed']} users would be needed, even if all of the methods' observed "
                     "spread were real")
        elif true.get("users_needed"):
            users = f"; ≈ {true['users_needed']} users would make it estimable"
        return f"true means: too noisy to tell ({true['reason']}{users}{_merged(true)})"
    if true["low"] <= -1 and true["high"] >= 1:
        return f"true means: no information (every correlation from -1 to +1 fits the data; {rel}{_merged(true)})"
    return (f"true means: {true['point']:+.2f} [{true['low']:+.2f}, {true['high']:+.2f}] "
            f"({rel}{_shared_noise(true)}{_merged(true)})")


def _merged(true: dict) -> str:
    """How many distinct deployments the interval counted, where methods with identical outputs were merged."""
    distinct, methods = true.get("distinct_methods"), true.get("methods")
    if distinct is None or methods is None or distinct == methods:
        return ""
    return f"; {distinct} distinct of {methods} methods (identical outputs count once)"


def _shared_noise(true: dict) -> str:
    """A warning where the metrics' noise correlates beyond what the interval's coverage was measured at."""
    kappa = true.get("noise_correlation")
    if kappa is None or abs(kappa) <= MEASURED_NOISE_CORRELATION:
        return ""
    return (f"; their noise correlates {kappa:+.2f}, beyond the ±{MEASURED_NOISE_CORRELATION:.1f} its coverage was "
            "measured at: shared noise may read as correlation")
