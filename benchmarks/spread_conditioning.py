"""Where the true-means interval still misses, on a toy whose noise is known exactly (issue #52 point 1).

Each study: m = methods − 1 contrasts per metric, true means N(0, 1) of correlation ρ, noise N(0, σ²) with
σ² = (1 − R) / R for reliability R, correlated κ between the two metrics; nothing is estimated. Two tests of ρ:

- `spread`: the printed procedure's (analysis/true_correlation.py): the cosine of the two metrics' vectors,
  its distribution simulated with true means scaled so that each metric's spread matches the observed one
  (`spread_to`, `cosine` from the package), here with the noise drawn from its true distribution;
- `lr`: the profile likelihood ratio of the 2 × 2 scatter matrix (Wishart, known noise), against χ²₁.

Each row: the shares of studies whose interval lies below / above the true ρ (2.5 % each if calibrated) and
the coverage, over all studies and over those the report prints an interval for (both metrics' estimated
reliability ≥ MIN_RELIABILITY). Under `spread` both metrics' spreads are matched, so any statistic of
(x·x, y·y, x·y) gives this same test: only a model of how the observed spread splits into true differences and
noise can change it.

    python benchmarks/spread_conditioning.py                           # the default cells, ~1 min
    python benchmarks/spread_conditioning.py --cells 20/0.3/0/0.6 --test lr --repetitions 2000
    python benchmarks/spread_conditioning.py --test spread --cells 20/0.5/0.9/0.3 --noise-users 16   # users resampled
    python benchmarks/spread_conditioning.py --test spread --cells 20/0.5/0.9/0.3 --noise-users 16 --damped
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from common import count, seed  # noqa: E402
from persalign.analysis.noise_draws import damped  # noqa: E402
from persalign.analysis.true_correlation import MIN_RELIABILITY, cosine, spread_to  # noqa: E402

CELLS = ["20/0.3/0/0.6", "10/0.3/0/0.6", "20/0.3/0/0.3", "20/0.5/0.9/0.3", "10/0.5/0.9/0.3"]
FISHER = np.tanh(np.linspace(-3.5, 3.5, 141))  # the likelihood ratio's candidate ρ
SCALES = np.concatenate([[0.0], np.exp(np.linspace(np.log(1e-3), np.log(100), 80))])  # true variances profiled


def true_means(rng, m: int, rho: float, size: int) -> tuple[np.ndarray, np.ndarray]:
    """(x, y): `size` draws of the two metrics' true contrasts, N(0, 1) of correlation ρ."""
    u, v = rng.standard_normal((2, size, m))
    return u, rho * u + np.sqrt(1 - rho ** 2) * v


def noise(rng, m: int, reliability: float, kappa: float, size: int) -> tuple[np.ndarray, np.ndarray]:
    """(x, y): `size` draws of the two metrics' noise, variance (1 − R) / R, correlated κ between them."""
    e, f = rng.standard_normal((2, size, m)) * np.sqrt((1 - reliability) / reliability)
    return e, kappa * e + np.sqrt(1 - kappa ** 2) * f


def user_noise(rng, m: int, reliability: float, kappa: float, users: int) -> np.ndarray:
    """(users, 2m): each user's noise row (x then y), as wide as `users` times a mean's, so their mean is one draw of
    `noise`."""
    e, f = noise(rng, m, reliability, kappa, users)
    return np.concatenate([e, f], 1) * np.sqrt(users)


def spread_test(rng, x: np.ndarray, y: np.ndarray, cell: tuple, draws: int, noise_pool: tuple = (None, False)) -> int:
    """−1 / +1 where the spread-matched test's interval lies below / above the true ρ (the observed statistic in
    the simulated lower / upper 2.5 % at the true ρ), else 0. `noise_pool`: (a study's centred user rows, whether
    to damp). With the rows the noise is drawn as persalign draws it, by resampling the users (damped: each draw's
    spread then damped as persalign's is, analysis/noise_draws.py); without them, from its true law."""
    m, reliability, rho, kappa = cell
    pool, damp = noise_pool
    shape_x, shape_y = true_means(rng, m, rho, draws)
    if pool is None:
        noise_x, noise_y = noise(rng, m, reliability, kappa, draws)
    else:
        resampled = pool[rng.integers(0, len(pool), size=(draws, len(pool)))].mean(1)
        resampled = damped(resampled, pool) if damp else resampled
        noise_x, noise_y = resampled[:, :m], resampled[:, m:]
    simulated = cosine(spread_to(shape_x, noise_x, x @ x), spread_to(shape_y, noise_y, y @ y))
    simulated = simulated[~np.isnan(simulated)]
    observed = cosine(x, y)
    below = (np.sum(simulated < observed) + 1) / (len(simulated) + 1)
    above = (np.sum(simulated > observed) + 1) / (len(simulated) + 1)
    return -1 if below <= 0.025 else 1 if above <= 0.025 else 0


def likelihood_ratio_test(x: np.ndarray, y: np.ndarray, cell: tuple) -> int:
    """−1 / +1 where the profile likelihood ratio's 95 % interval lies below / above the true ρ, else 0."""
    m, reliability, rho, kappa = cell
    variance = (1 - reliability) / reliability
    a, b, r = np.meshgrid(SCALES, SCALES, FISHER, indexing="ij")
    s11, s22, s12 = a + variance, b + variance, r * np.sqrt(a * b) + kappa * variance
    det = s11 * s22 - s12 ** 2
    valid = det > 1e-12
    det = np.where(valid, det, 1.0)
    loglik = -0.5 * m * np.log(det) - 0.5 * (s22 * (x @ x) - 2 * s12 * (x @ y) + s11 * (y @ y)) / det
    profile = np.where(valid, loglik, -np.inf).max((0, 1))
    kept = FISHER[2 * (profile.max() - profile) <= 3.841]
    return 1 if kept.min() > rho else -1 if kept.max() < rho else 0


def study(rng, cell: tuple, users: int | None) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """One study's observed (x, y) and, with `users`, its centred user noise rows (the resampling pool)."""
    m, reliability, rho, kappa = cell
    x, y = true_means(rng, m, rho, 1)
    if users is None:
        e, f = noise(rng, m, reliability, kappa, 1)
        return x[0] + e[0], y[0] + f[0], None
    rows = user_noise(rng, m, reliability, kappa, users)
    mean = rows.mean(0)
    return x[0] + mean[:m], y[0] + mean[m:], rows - mean


def row(cell: tuple, test: str, repetitions: int, draws: int, seed_: int, noise_law: tuple = (None, False)) -> str:
    """One table row; `noise_law`: (users resampled or None for the true law, whether their draws are damped)."""
    # the studies from their own stream, so that both tests see the same ones
    studies, simulation = (np.random.default_rng(s) for s in np.random.SeedSequence(seed_).spawn(2))
    m, reliability = cell[0], cell[1]
    outcomes = {"all": [], "printed": []}
    for _ in range(repetitions):
        x, y, pool = study(studies, cell, noise_law[0])
        outcome = (spread_test(simulation, x, y, cell, draws, (pool, noise_law[1])) if test == "spread"
                   else likelihood_ratio_test(x, y, cell))
        outcomes["all"].append(outcome)
        variance = (1 - reliability) / reliability
        if min(1 - variance * m / (x @ x), 1 - variance * m / (y @ y)) >= MIN_RELIABILITY:
            outcomes["printed"].append(outcome)
    text = []
    for values in outcomes.values():
        values = np.array(values)
        text.append(f"{np.mean(values == -1):.3f} / {np.mean(values == 1):.3f} / {np.mean(values == 0):.3f}")
    share = len(outcomes["printed"]) / repetitions
    return f"| {test} | {m + 1} | {reliability:g} | {cell[2]:g} | {cell[3]:g} | {text[0]} | {text[1]} | {share:.2f} |"


def cell_arg(text: str) -> tuple[int, float, float, float]:
    """METHODS/RELIABILITY/RHO/NOISE_CORR, checked (argparse prints the rule in one line)."""
    try:
        methods, reliability, rho, kappa = text.split("/")
        cell = int(methods) - 1, float(reliability), float(rho), float(kappa)
    except ValueError:
        cell = (0, 0.0, 0.0, 0.0)
    if cell[0] < 2 or not 0 < cell[1] < 1 or not -1 < cell[2] < 1 or not -1 < cell[3] < 1:
        raise argparse.ArgumentTypeError("must be METHODS/RELIABILITY/RHO/NOISE_CORR (methods >= 3, reliability, "
                                         f"rho and noise correlation strictly inside their ranges), not {text!r}")
    return cell


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cells", nargs="+", type=cell_arg, default=[cell_arg(c) for c in CELLS],
                        metavar="METHODS/RELIABILITY/RHO/NOISE_CORR", help=f"default: {' '.join(CELLS)}")
    parser.add_argument("--test", choices=("spread", "lr"), nargs="+", default=["spread", "lr"])
    parser.add_argument("--repetitions", type=count, default=2000)
    parser.add_argument("--draws", type=count, default=999, help="simulated studies per test (spread)")
    parser.add_argument("--seed", type=seed, default=0)
    parser.add_argument("--noise-users", type=count, metavar="USERS",
                        help="draw the spread test's noise by resampling this many simulated users, as persalign does "
                             "(default: from its true law)")
    parser.add_argument("--damped", action="store_true",
                        help="with --noise-users: damp each resampled draw's spread as persalign does")
    args = parser.parse_args()
    if args.damped and args.noise_users is None:
        parser.error("--damped needs --noise-users (the true law's draws need no damping)")
    print("| test | methods | reliability | true ρ | noise corr | all: interval below / above ρ / covered "
          "| printed: below / above / covered | printed |")
    print("|---|---|---|---|---|---|---|---|")
    for cell in args.cells:
        for test in args.test:
            print(row(cell, test, args.repetitions, args.draws, args.seed, (args.noise_users, args.damped)), flush=True)


if __name__ == "__main__":
    main()
