"""Coverage of the true-means correlation interval (issue #52 point 1) over the whole grid: 6 / 10 / 20 methods,
reliability 0.3 / 0.5 / 0.9, true ρ 0 / 0.5 / 0.9, Pearson / Spearman / Kendall, 16 users; beside it the Fisher-z
interval of the observed means (the only one printed before) on the same studies.

Each row: the share of printed intervals covering the true value (the statistic's population value for the
true means' ρ), and the share of studies where one was printed (the rest: "too noisy to tell").

    python benchmarks/coverage_true_correlation.py --repetitions 1000      # ~15 min on 2 cores
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.test_true_correlation import simulated_rows  # noqa: E402  (the tests' simulated studies)

from persalign.analysis.correlations import correlate  # noqa: E402
from persalign.analysis.intervals import correlation_interval  # noqa: E402
from persalign.analysis.true_correlation import population_scale, true_correlation  # noqa: E402


def row(statistic: str, methods: int, reliability: float, rho: float, repetitions: int) -> str:
    rng = np.random.default_rng(hash((statistic, methods, reliability, rho)) % 2**32)
    truth = float(population_scale(statistic, rho))
    covered = printed = old_covered = old_printed = 0
    for repetition in range(repetitions):
        x, y = simulated_rows(rng, methods, rho, reliability)
        new = true_correlation(x, y, statistic, seed=repetition)
        if new["low"] is not None:
            printed += 1
            covered += new["low"] <= truth <= new["high"]
        point = correlate(x.mean(1), y.mean(1), statistic)
        old = correlation_interval(statistic, point.value, methods)
        if old["low"] is not None:
            old_printed += 1
            old_covered += old["low"] <= truth <= old["high"]
    old_text = f"{old_covered / old_printed:.3f}" if old_printed else "none printed"
    return (f"| {statistic} | {methods} | {reliability:g} | {rho:g} | {covered / max(printed, 1):.3f} | "
            f"{printed / repetitions:.2f} | {old_text} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repetitions", type=int, default=1000)
    parser.add_argument("--statistics", nargs="+", default=["pearson", "spearman", "kendall"])
    args = parser.parse_args()
    print("| statistic | methods | reliability | true ρ | true-means coverage | printed | observed-means (Fisher z) coverage |")
    print("|---|---|---|---|---|---|---|")
    for statistic in args.statistics:
        for methods in (6, 10, 20):
            for reliability in (0.3, 0.5, 0.9):
                for rho in (0.0, 0.5, 0.9):
                    print(row(statistic, methods, reliability, rho, args.repetitions), flush=True)


if __name__ == "__main__":
    main()
