"""Finding 3's cross-fitted interval against max − max when winners nearly tie (issue #52 point 4).

The cross-fitted procedure estimates the gap between the ICL variant and the reward method that a half of
the users would pick, measured on the other half (analysis/paired.py). That equals "best ICL − best reward
method" (max − max of the true means) when the winners are clear; with near-ties the half-chosen winners
are sometimes the runners-up, and the estimate leans below max − max. Simulated here: per-user values =
true mean + a shared user level (sd 5) + method noise (sd 3), as tests/test_paired.py; three ICL variants
and four reward methods, with near-ties in one group, in both, or none.

    python benchmarks/coverage_finding3.py --repetitions 400      # ~10 min on 2 cores
"""

from __future__ import annotations

import argparse

import numpy as np

from common import count
from persalign.analysis.paired import crossfit_comparison

CASES = {"near-ties in both groups": np.array([5.0, 4.5, 2.0, 1.0, 0.5, 0.0, -2.0]),
         "ICL variants tie (3 within 0.4)": np.array([5.0, 4.8, 4.6, 1.0, -5.0, -6.0, -8.0]),
         "reward methods tie (4 within 0.6)": np.array([5.0, -1.0, -3.0, 1.0, 0.8, 0.6, 0.4]),
         "clear winners": np.array([5.0, -1.0, -3.0, 1.0, -5.0, -6.0, -8.0]),
         "1-point steps, method noise sd 10": np.array([5.0, 4.0, 3.0, 1.0, 0.0, -1.0, -2.0])}
METHOD_NOISE = {"1-point steps, method noise sd 10": 10.0}  # else 3, as tests/test_paired.py
IS_ICL = np.array([True, True, True, False, False, False, False])


def coverage(truth: np.ndarray, users: int, repetitions: int, noise: float = 3.0) -> tuple[float, float]:
    """(coverage of max − max, mean estimate − max − max)."""
    rng = np.random.default_rng(users)
    target = truth[IS_ICL].max() - truth[~IS_ICL].max()
    covered, bias = 0, []
    for repetition in range(repetitions):
        values = truth[:, None] + rng.normal(0, 5, (1, users)) + rng.normal(0, noise, (len(truth), users))
        result = crossfit_comparison(values, values, IS_ICL, seed=repetition)
        covered += result["low"] <= target <= result["high"]
        bias.append(result["mean"] - target)
    return covered / repetitions, float(np.mean(bias))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repetitions", type=count, default=400)
    parser.add_argument("--cases", nargs="*", choices=list(CASES), help="default: every case")
    args = parser.parse_args()
    print("| case | users | coverage of max − max | mean estimate − (max − max) |")
    print("|---|---|---|---|")
    for case, truth in CASES.items():
        if args.cases and case not in args.cases:
            continue
        for users in (13, 29, 75):
            covered, bias = coverage(truth, users, args.repetitions, METHOD_NOISE.get(case, 3.0))
            print(f"| {case} | {users} | {covered:.3f} | {bias:+.2f} |", flush=True)


if __name__ == "__main__":
    main()
