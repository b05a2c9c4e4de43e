"""Coverage of the true-means correlation interval (issue #52 point 1) over the whole grid: 6 / 10 / 20 methods,
reliability 0.3 / 0.5 / 0.9, true ρ 0 / 0.5 / 0.9, Pearson / Spearman / Kendall, 16 users; beside it the Fisher-z
interval of the observed means (the only one printed before) on the same studies.

Each row: the share of confidence sets covering the true value (the statistic's population value for the
true means' ρ; a set no ρ fits, `no_fit`, is empty and counts as a miss), the same over the printed intervals
alone, the share of studies where one was printed, the share where no ρ fits (the rest: "too noisy to tell"),
and the CPU milliseconds the true-means interval took per study. One interval of
ρ serves the three statistics (analysis/true_correlation.py), so the default `--statistics pearson` measures
them all; the others draw other studies (each cell's seed comes from its name). Each interval here draws the tests'
COVERAGE_DRAWS (199) studies per candidate ρ; reports draw DRAWS (999): docs/design-notes.md "Whitening".

    python benchmarks/coverage_true_correlation.py --repetitions 1000      # ~5 min (Pearson; not timed alone)
    python benchmarks/coverage_true_correlation.py --repetitions 4000 --seed 99 --cells pearson/20/0.5/0.9
    python benchmarks/coverage_true_correlation.py --repetitions 1000 --noise-corr 0.6   # metrics' noise shared more
    python benchmarks/coverage_true_correlation.py --repetitions 1000 --group 2/0.9      # methods that err in pairs
    python benchmarks/coverage_true_correlation.py --repetitions 1000 --users 32         # more users than methods
    python benchmarks/coverage_true_correlation.py --repetitions 1000 --min-reliability=-inf   # no floor
    python benchmarks/coverage_true_correlation.py --repetitions 600 --true-df 4 --noise discrete_skewed \
        --users 40 --cells pearson/10/0.7/0 pearson/10/0.4/0.5          # heavy-tailed methods (issue #75)
    python benchmarks/coverage_true_correlation.py --sim-tails none 4 ...  # a variant of the simulated true means
"""

from __future__ import annotations

import argparse
import sys
import time
import zlib
from pathlib import Path
from unittest import mock

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from common import correlation, count, floor, seed, t_df, tails  # noqa: E402
from persalign.analysis import true_correlation  # noqa: E402
from persalign.analysis.correlations import correlate  # noqa: E402
from persalign.analysis.intervals import correlation_interval  # noqa: E402
from tests.test_true_correlation import coverage, true_means_interval  # noqa: E402  (the tests' studies and loop)


def observed_means_interval(x, y, statistic: str, _repetition: int) -> dict:
    """The interval persalign printed before: Fisher z on the methods' observed means, as if they were exact."""
    return correlation_interval(statistic, correlate(x.mean(1), y.mean(1), statistic).value, len(x))


def cell(text: str) -> tuple[str, int, float, float]:
    """A grid cell STATISTIC/METHODS/RELIABILITY/RHO, checked (argparse prints the rule in one line)."""
    parts = text.split("/")
    try:
        statistic, methods, reliability, rho = parts[0], int(parts[1]), float(parts[2]), float(parts[3])
    except (IndexError, ValueError):
        statistic = None
    if len(parts) != 4 or statistic not in ("pearson", "spearman", "kendall") or methods < 3 \
            or not 0 < reliability <= 1 or not -1 <= rho <= 1:
        raise argparse.ArgumentTypeError("must be STATISTIC/METHODS/RELIABILITY/RHO (pearson|spearman|kendall, "
                                         f"methods >= 3, reliability in (0, 1], rho in [-1, 1]), not {text!r}")
    return statistic, methods, reliability, rho


def group(text: str) -> tuple[int, float]:
    """Methods in groups SIZE/CORR whose noise correlates CORR with the group's first method's, checked."""
    try:
        size, corr = text.split("/")
        size, corr = int(size), float(corr)
    except ValueError:
        size, corr = 0, 0.0
    if size < 1 or not 0 <= corr < 1:
        raise argparse.ArgumentTypeError(f"must be SIZE/CORR (size >= 1, corr in [0, 1)), not {text!r}")
    return size, corr


def row(cell_: tuple[str, int, float, float], repetitions: int, seed: int | None, design: dict) -> str:
    statistic, methods, reliability, rho = cell_
    if seed is None:  # both procedures: the same studies
        seed = zlib.crc32(repr((statistic, methods, reliability, rho)).encode())
    no_fit = []

    def counted(x, y, statistic_, repetition):  # the tests' interval, its empty sets counted
        result = true_means_interval(x, y, statistic_, repetition)
        no_fit.append(bool(result.get("no_fit")))
        return result

    started = time.process_time()
    covered, printed = coverage(statistic, methods, rho, reliability, repetitions, seed, interval=counted,
                                design=design)
    per_study = (time.process_time() - started) / repetitions  # CPU seconds of the true-means interval
    empty = sum(no_fit) / repetitions
    of_printed = covered * (printed + empty) / printed if printed else float("nan")  # the empty sets left out
    old_covered, old_printed = coverage(statistic, methods, rho, reliability, repetitions, seed,
                                        interval=observed_means_interval, design=design)
    old_text = f"{old_covered:.3f}" if old_printed else "none printed"
    return (f"| {statistic} | {methods} | {reliability:g} | {rho:g} | {covered:.3f} | {of_printed:.3f} | {printed:.2f} "
            f"| {empty:.3f} | {old_text} | {per_study * 1000:.1f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repetitions", type=count, default=1000)
    parser.add_argument("--statistics", nargs="+", default=["pearson"],
                        help="one interval of ρ serves all three; spearman / kendall draw other studies (default: "
                             "pearson)")
    parser.add_argument("--cells", nargs="+", type=cell, metavar="STATISTIC/METHODS/RELIABILITY/RHO",
                        help="only these cells, e.g. pearson/20/0.5/0.9 (default: the whole grid)")
    parser.add_argument("--seed", type=seed, help="one seed for every cell (default: one per cell, from its name)")
    parser.add_argument("--noise-corr", type=correlation, default=0.3,
                        help="correlation of a user's noise between the two metrics (the tests' 0.3; the news study "
                             "measures 0.07-0.22)")
    parser.add_argument("--group", type=group, default=(1, 0.0), metavar="SIZE/CORR",
                        help="methods in groups of SIZE whose noise correlates CORR (default 1/0: each method errs "
                             "alone; the news study's err together: docs/design-notes.md)")
    parser.add_argument("--users", type=count, default=16,
                        help="users per study; each cell's reliability is that of a method's mean over them "
                             "(default 16, the tests'; the news study has 29)")
    parser.add_argument("--true-df", type=t_df, help="the studies' true means bivariate t with this many degrees "
                        "of freedom (default: normal)")
    parser.add_argument("--noise", choices=["normal", "discrete_skewed"], default="normal",
                        help="discrete_skewed: x an accuracy over 6 queries, y's noise right-skewed (issue #75)")
    parser.add_argument("--sim-tails", nargs="+", type=tails,
                        help="the interval's simulated true means: these tails in turn (none = normal; default: "
                             "persalign's TRUE_MEANS_TAILS)")
    parser.add_argument("--min-reliability", type=floor, default=true_correlation.MIN_RELIABILITY,
                        help="the reliability below which no interval is printed (default: persalign's "
                             f"{true_correlation.MIN_RELIABILITY}; --min-reliability=-inf prints every study's)")
    args = parser.parse_args()
    print("| statistic | methods | reliability | true ρ | true-means coverage | of the printed intervals | printed "
          "| no ρ fits | observed-means (Fisher z) coverage | true-means CPU ms / study |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    grid = [(statistic, methods, reliability, rho) for statistic in args.statistics for methods in (6, 10, 20)
            for reliability in (0.3, 0.5, 0.9) for rho in (0.0, 0.5, 0.9)]
    simulated_tails = tuple(args.sim_tails) if args.sim_tails else true_correlation.TRUE_MEANS_TAILS
    with mock.patch.object(true_correlation, "MIN_RELIABILITY", args.min_reliability), \
            mock.patch.object(true_correlation, "TRUE_MEANS_TAILS", simulated_tails):  # a variant, measured
        for cell_ in args.cells or grid:
            design = {"noise_corr": args.noise_corr, "group": args.group, "users": args.users,
                      "true_df": args.true_df, "noise": args.noise}
            print(row(cell_, args.repetitions, args.seed, design), flush=True)


if __name__ == "__main__":
    main()
