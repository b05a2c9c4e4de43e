"""Which correlation the true-means interval covers (analysis/true_correlation.py, docs/design-notes.md "Which
correlation the interval is for"): on the same simulated studies, its coverage of the generator's ρ (the
population value the interval is built and tested for) and of the realised Pearson correlation of the study's
own k true means (the listed methods alone). The tests' generator (16 users, the metrics' noise correlated
0.3, methods erring independently), Pearson, each cell's seed from its name. Not a timing.

    python benchmarks/coverage_realised_correlation.py --repetitions 1000
    python benchmarks/coverage_realised_correlation.py --repetitions 1000 --cells 20/0.9/0.5 10/0.5/0
"""

from __future__ import annotations

import argparse
import sys
import zlib
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from common import count  # noqa: E402
from persalign.analysis.true_correlation import true_correlation  # noqa: E402
from tests.test_true_correlation import COVERAGE_DRAWS, simulated_rows  # noqa: E402

import numpy as np  # noqa: E402

CELLS = ["6/0.5/0.5", "6/0.5/0.9", "6/0.9/0", "10/0.3/0.5", "10/0.5/0", "10/0.5/0.9", "10/0.9/0.9", "20/0.3/0",
         "20/0.3/0.9", "20/0.5/0.9", "20/0.9/0.5", "20/0.9/0.9"]


def cell(text: str) -> tuple[int, float, float]:
    """METHODS/RELIABILITY/RHO, checked (argparse prints the rule in one line)."""
    try:
        methods, reliability, rho = text.split("/")
        methods, reliability, rho = int(methods), float(reliability), float(rho)
    except ValueError:
        methods, reliability, rho = 0, 0.0, 2.0
    if methods < 6 or not 0 < reliability <= 1 or not -1 <= rho <= 1:
        raise argparse.ArgumentTypeError(f"must be METHODS/RELIABILITY/RHO (methods >= 6, reliability in (0, 1], "
                                         f"rho in [-1, 1]), not {text!r}")
    return methods, reliability, rho


def cell_name(text: str) -> str:
    cell(text)
    return text  # the name itself seeds the cell's studies


def row(text: str, repetitions: int) -> str:
    methods, reliability, rho = cell(text)
    rng = np.random.default_rng(zlib.crc32(text.encode()))
    population = realised_covered = printed = 0
    for repetition in range(repetitions):
        realised: list[float] = []
        x, y = simulated_rows(rng, methods, rho, reliability, realised=realised)
        result = true_correlation(x, y, "pearson", seed=repetition, draws=COVERAGE_DRAWS)
        if result["low"] is None:
            continue
        printed += 1
        population += result["low"] <= rho <= result["high"]
        realised_covered += result["low"] <= realised[0] <= result["high"]
    shares = (population / max(printed, 1), realised_covered / max(printed, 1))
    return f"| {methods} / {reliability:g} / {rho:g} | {shares[0]:.3f} | {shares[1]:.3f} | {printed} |"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repetitions", type=count, default=1000)
    parser.add_argument("--cells", nargs="+", type=cell_name, default=CELLS, metavar="METHODS/RELIABILITY/RHO",
                        help="cells to measure (default: the twelve of docs/design-notes.md)")
    args = parser.parse_args()
    print("| methods / reliability / ρ | against ρ (population) | against the k methods' realised correlation "
          "| printed |")
    print("|---|---|---|---|")
    for text in args.cells:
        print(row(text, args.repetitions), flush=True)


if __name__ == "__main__":
    main()
