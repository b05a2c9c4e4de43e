"""Coverage of the Δ-vs-greedy interval off the normal (issue #75): the procedure before the issue (the union of
Hall's and the t interval, g1 and n − 1 df) beside today's (`intervals.difference_rows_bounds`: G1 (1 + 4/n),
kurtosis-matched df where some users' Δ is 0), on the same simulated studies, at 8, 13, 16 and 29 users.

Each row: the share of 95 % intervals covering the true mean Δ (a study whose users all have one value prints no
interval and is left out). The populations: the issue's lognormal-skewed Δ (centred lognormal σ = 1, and σ = 0.75),
zero-inflated Δ with a real shift (60 % of users 0, the rest N(5, 10)) and without one (the rest N(0, 10): false
positives = 1 − coverage), the earlier tests' gamma, normal and difference-of-two-lognormals.

    python benchmarks/coverage_difference.py --repetitions 20000      # ~2 min (not timed alone)
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
from scipy import stats

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from common import count  # noqa: E402
from persalign.analysis.intervals import difference_rows_bounds, hall_bounds  # noqa: E402

POPULATIONS = {  # name: (sampler(rng, shape), true mean Δ)
    "lognormal σ = 1, centred": (lambda rng, s: rng.lognormal(0, 1, s) - np.exp(0.5), 0.0),
    "lognormal σ = 0.75, centred": (lambda rng, s: rng.lognormal(0, 0.75, s) - np.exp(0.75 ** 2 / 2), 0.0),
    "60 % zero, rest N(5, 10)": (lambda rng, s: np.where(rng.random(s) < 0.6, 0.0, rng.normal(5, 10, s)), 2.0),
    "60 % zero, rest N(0, 10) (null)": (lambda rng, s: np.where(rng.random(s) < 0.6, 0.0, rng.normal(0, 10, s)), 0.0),
    "gamma(2, 4) − 5": (lambda rng, s: rng.gamma(2, 4, s) - 5, 3.0),
    "normal N(3, 6)": (lambda rng, s: rng.normal(3, 6, s), 3.0),
    "lognormal − lognormal (σ = 1)": (lambda rng, s: rng.lognormal(0, 1, s) - rng.lognormal(0, 1, s), 0.0),
}
USERS = (8, 13, 16, 29)


def before_bounds(values: np.ndarray, level: float = 0.95) -> tuple[np.ndarray, np.ndarray]:
    """The Δ interval before issue #75: Hall's (g1, n − 1 df) ∪ t (n − 1 df)."""
    n = values.shape[-1]
    low, high = hall_bounds(values, level)
    half = stats.t.ppf(1 - (1 - level) / 2, n - 1) * values.std(-1, ddof=1) / np.sqrt(n)
    return np.minimum(low, values.mean(-1) - half), np.maximum(high, values.mean(-1) + half)


def covered(bounds, values: np.ndarray, truth: float) -> float:
    low, high = bounds(values)
    return float(np.mean((low <= truth) & (truth <= high)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repetitions", type=count, default=20000)
    args = parser.parse_args()
    print("| per-user Δ | " + " | ".join(f"{n} users" for n in USERS) + " |")
    print("|---|" + "---|" * len(USERS))
    for name, (sampler, truth) in POPULATIONS.items():
        cells = []
        for users in USERS:
            values = sampler(np.random.default_rng(users), (args.repetitions, users))
            values = values[np.ptp(values, axis=1) > 0]  # every user equal: no interval
            cells.append(f"{100 * covered(before_bounds, values, truth):.1f} → "
                         f"{100 * covered(lambda v: difference_rows_bounds(v, 0.95), values, truth):.1f} %")
        print(f"| {name} | " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
