"""The correlation of the methods' TRUE means across methods, counting the noise each method's metric carries.

A method's metric is a mean over a few users: across methods the observed means vary by their true
differences plus measurement noise, and a correlation of noisy means is pulled toward 0 (the paper's
Finding 1 direction). With the per-user rows this noise is measured, not assumed:

- noise: the covariance C of the methods' means (both metrics, every method) from the centred per-user
  rows, C = DDᵀ / (n (n − 1)); users are shared, so noise correlated across methods is in C, and a user
  effect common to every method cancels out of any correlation across methods;
- the true between-method covariance T = S − N: S the observed covariance of the means across methods,
  N what the noise adds to it, (tr C_ab − 1ᵀC_ab1 / k) / (k − 1) for metrics a, b over k methods;
- each metric's reliability across methods R = T_aa / S_aa (the share of the observed spread that is real);
  the point estimate is the ρ at which the observed statistic is the simulated median (below), or where
  that is a bound the interval stops short of, the most compatible ρ it kept: always inside the interval;
- the interval inverts a test whose statistic is the correlation of the two metrics' method means after
  whitening each by its fitted covariance τ²·I + noise (`whitening`; τ² by normal likelihood): a direction
  in which the methods err together (on the news study the methods that chose λ = 0 all decode greedily)
  counts by how much of it is real, so shared noise no longer reads as true spread or correlation. For each
  candidate ρ (a grid in Fisher-z) that statistic's distribution is simulated with noise drawn by resampling
  the users (rows whitened by maps fitted without their user: `noise_pool`; each draw's 2 × 2 spread damped to
  unbiased moments: analysis/noise_draws.py) and true means of correlation ρ (half of the draws a bivariate
  normal's shape, half a bivariate t's with 4 degrees of freedom: methods whose true means are heavy-tailed)
  scaled so that each metric's simulated whitened means spread exactly as the observed ones do: the observed
  spread is known, only its split into true differences and noise is not (letting it vary made the test too
  wide at ρ = 0.9: docs/design-notes.md); a ρ whose two-sided p-value ≥ 5 % is kept, common random numbers
  across the grid. One interval of ρ for all three statistics, stated on each one's population scale (Pearson
  ρ; Spearman (6/π) asin(ρ/2); Kendall (2/π) asin ρ); the observed rank statistic is printed beside it. Where
  every ρ is rejected the set is empty (`no_fit`: the data more extreme than any ρ gives with this noise, not
  a verdict of noise), with the most compatible ρ as its point.

ρ is a population value, like the observed Fisher-z interval's: the correlation of the true means of methods
drawn like these (the simulation draws new true means at every ρ). The listed methods' own realised correlation
it covers more often than 95 % (0.957-1.000: benchmarks/coverage_realised_correlation.py).

The noise correlation between the two metrics is reported beside the reliabilities: the coverage grid was
measured at 0.3 (the news study measures 0.07-0.22); at 0.6 with reliability 0.3 the interval reads the noise
the metrics share as correlation (coverage 0.911-0.925), and the report says so: the studies it prints are those
whose observed spread is large, where the noise is larger than the simulation draws it (docs/design-notes.md
"Spread"; benchmarks/spread_conditioning.py shows it with the noise known exactly).

No interval where a metric's true spread is estimated ≤ 0 or its reliability below MIN_RELIABILITY ("the
methods differ by less than their measurement noise"), with the users that would reach it (where a metric
shows no true spread, a lower bound: its whole observed spread taken as real); none below
MIN_NOISE_USERS users (the noise is then unmeasured) or MIN_TRUE_METHODS methods (coverage unmeasured).
Coverage by simulation: tests/test_true_correlation.py, docs/design-notes.md.

    pytest tests/test_true_correlation.py          # its coverage, simulated at the sizes users run
"""

from __future__ import annotations

import functools

import numpy as np

from persalign.analysis.correlations import distinct_deployments
from persalign.analysis.noise_draws import damped

MIN_NOISE_USERS = 8  # users below which the noise covariance is not estimated (the means' intervals need as many)
MIN_TRUE_METHODS = 6  # the fewest methods the coverage was measured at (docs/design-notes.md)
MIN_RELIABILITY = 0.2  # below it the verdict "too noisy to tell" with the users needed, not a near-whole-range
# interval; printed there the intervals would cover (0.956-0.981 at reliability 0.1-0.3). The floor keeps the
# studies whose observed spread is large, where the test is least calibrated (design-notes.md "Spread")
MEASURED_NOISE_CORRELATION = 0.3  # the metrics' noise correlation the grid was measured at; at 0.6 and
# reliability 0.3 coverage fell to 0.911-0.925, shared noise read as correlation (design-notes.md)
GRID = np.tanh(np.linspace(-3.5, 3.5, 71))  # candidate ρ, even in Fisher-z
DRAWS = 999  # simulated studies per candidate ρ. With 199 (the coverage grid's, for its time) an end of the news
# study's intervals moved by sd 0.09-0.10 between seeds, with 999 by 0.03-0.05; coverage at 999 on 10 grid cells
# within ±1.3 points of 199's on the same studies (docs/design-notes.md "Whitening")
LEFT_OUT_BLOCK = 64  # users whose leave-one-out whitening maps are fitted as one stacked eigh
TRUE_MEANS_TAILS: tuple = (None, 4)  # the simulated true means' tails, one per draw in turn (None: normal; 4: a
# bivariate t with 4 df per method). Normal alone covered 0.912-0.929 where the methods' true means are t4 (issue
# #75); the half-and-half mixture 0.925-0.965 there and 0.949-0.979 on normal ones (600 studies a cell; t8 alone
# read like it: design-notes.md "True means off the normal")
PROCEDURE = ("test inversion on whitened means, true means normal or t4 at the observed spread, noise by "
             "resampling users, each draw's spread damped to unbiased moments")


def population_scale(statistic: str, rho):
    """The statistic's value for a bivariate normal of correlation ρ."""
    rho = np.asarray(rho, dtype=float)
    return {"pearson": lambda: rho, "spearman": lambda: 6 / np.pi * np.arcsin(rho / 2),
            "kendall": lambda: 2 / np.pi * np.arcsin(rho)}[statistic]()


def noise_parts(x_rows: np.ndarray, y_rows: np.ndarray) -> dict:
    """Observed covariance S of the means across methods, the noise's share N of it, T = S − N, and the
    centred user rows (2k, n) whose resampling draws the noise."""
    k, n = x_rows.shape
    means = np.concatenate([x_rows.mean(1), y_rows.mean(1)])
    centred = np.concatenate([x_rows, y_rows]) - means[:, None]
    noise = centred @ centred.T / (n * (n - 1))
    blocks = {"xx": (slice(0, k), slice(0, k)), "yy": (slice(k, 2 * k), slice(k, 2 * k)),
              "xy": (slice(0, k), slice(k, 2 * k))}
    observed = np.cov(means[:k], means[k:])
    s = {"xx": observed[0, 0], "yy": observed[1, 1], "xy": observed[0, 1]}
    n_ = {key: (np.trace(noise[b]) - noise[b].sum() / k) / (k - 1) for key, b in blocks.items()}
    return {"S": s, "N": n_, "T": {key: s[key] - n_[key] for key in s}, "centred": centred, "means": means}


def noise_correlation(parts: dict) -> float | None:
    """The correlation between the two metrics' noise across methods (N_xy / √(N_xx N_yy)); None without noise."""
    xx, yy = parts["N"]["xx"], parts["N"]["yy"]
    return float(parts["N"]["xy"] / np.sqrt(xx * yy)) if xx > 0 and yy > 0 else None


def users_for(parts: dict, users: int, target: float = 0.5) -> tuple[int, bool] | None:
    """(users at which both metrics' reliability would reach `target`, noise ∝ 1 / users; whether that is only a
    lower bound). A metric whose methods show no true spread beyond their noise gives a lower bound: its whole
    observed spread taken as real, the most the data allows. None if a metric's means do not vary at all."""
    needed, bound = [], False
    for key in ("xx", "yy"):
        true, noise, observed = parts["T"][key], parts["N"][key], parts["S"][key]
        if true <= 0:
            if observed <= 0:
                return None
            true, bound = observed, True
        needed.append(users * noise / true * target / (1 - target))
    return int(np.ceil(max(needed + [users]))), bound


@functools.lru_cache(maxsize=64)
def contrasts(k: int) -> np.ndarray:
    """(k, k − 1) orthonormal contrasts: Qᵀ of a vector of k method means is its spread, the grand mean removed.
    Cached per k (read-only): a coverage simulation asks for it once per user and study."""
    q = np.linalg.eigh(np.eye(k) - 1.0 / k)[1][:, 1:]
    q.flags.writeable = False
    return q


def true_variance(contrast: np.ndarray, noise: np.ndarray) -> np.ndarray:
    """The true variance τ² across methods that maximises the normal likelihood of the method means' contrasts
    (true τ²·I plus noise of covariance `noise`, on a log grid): the directions the noise leaves clean count fully,
    where the plain spread S − N counts every direction alike. Stacked: (..., k − 1) contrasts, (..., k − 1, k − 1)
    noise, one τ² each."""
    values, vectors = np.linalg.eigh(noise)
    values = np.clip(values, 0, None)
    squares = np.einsum("...ji,...j->...i", vectors, contrast) ** 2
    scale = np.maximum((contrast * contrast).sum(-1) / contrast.shape[-1], 1e-300)
    grid = scale[..., None] * np.exp(np.linspace(-12, 2, 561))  # (..., 561)
    total = grid[..., None] + values[..., None, :]
    likelihood = -(np.log(total) + squares[..., None, :] / total).sum(-1)
    return np.take_along_axis(grid, likelihood.argmax(-1)[..., None], -1)[..., 0]


def whitening(means: np.ndarray, user_covariance: np.ndarray, users: int) -> np.ndarray:
    """(k − 1, k) map of a metric's k method means to contrasts whitened by their fitted covariance τ²·I + noise
    (noise: the per-user covariance / users): each direction counts by how much of it is real, so the direction
    in which methods that err together share their noise counts little."""
    q = contrasts(means.shape[-1])
    noise = q.T @ user_covariance @ q / users
    tau2 = true_variance(means @ q, noise)
    values, vectors = np.linalg.eigh(np.asarray(tau2)[..., None, None] * np.eye(q.shape[1]) + noise)
    return (vectors / np.sqrt(values)[..., None, :]) @ np.swapaxes(vectors, -1, -2) @ q.T


def noise_pool(parts: dict) -> np.ndarray:
    """(users, 2(k − 1)): each user's row, centred at the other users' mean and whitened by the maps fitted
    without that user, then centred. Resampling it draws the whitened means' noise. Whitening by the same users'
    covariance would understate it: the directions a small sample of users measures as quiet are weighted up
    (at 20 methods in pairs 0.53 of the true noise, measured; design-notes.md "Whitening")."""
    means, rows = parts["means"], parts["centred"].T
    n, k = len(rows), len(means) // 2
    pool = np.empty((n, 2 * (k - 1)))
    for start in range(0, n, LEFT_OUT_BLOCK):  # users in blocks: memory grows with n · block, not n²
        block = range(start, min(n, start + LEFT_OUT_BLOCK))
        others = np.stack([np.delete(rows, user, 0) for user in block])  # (block, n − 1, 2k): each user left out
        residual, others = rows[block.start:block.stop] - others.mean(1), others - others.mean(1, keepdims=True)
        for metric, whitened in ((slice(0, k), slice(0, k - 1)), (slice(k, 2 * k), slice(k - 1, 2 * k - 2))):
            covariance = np.swapaxes(others[..., metric], 1, 2) @ others[..., metric] / (n - 2)  # (block, k, k)
            maps = whitening(np.broadcast_to(means[metric], (len(block), k)), covariance, n)  # (block, k − 1, k)
            pool[block.start:block.stop, whitened] = np.einsum("uij,uj->ui", maps, residual[:, metric])
    return pool - pool.mean(0)


def spread_to(shape: np.ndarray, noise: np.ndarray, spread: float) -> np.ndarray:
    """Whitened true means of the given shape, scaled so that true + noise has the observed whitened spread (sum of
    squares): the positive root of |c·shape + noise|² = spread; NaN where no scale reaches it (the noise drawn is
    then wider than the data allow)."""
    a, b = (shape * shape).sum(-1), 2 * (shape * noise).sum(-1)
    c = (noise * noise).sum(-1) - spread
    discriminant = b * b - 4 * a * c
    scale = (-b + np.sqrt(np.where(discriminant >= 0, discriminant, np.nan))) / (2 * a)
    return np.where(scale > 0, scale, np.nan)[..., None] * shape + noise


def cosine(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """The test statistic: the correlation of the two metrics' whitened contrasts (Pearson's r of the means where
    the noise is the same in every direction)."""
    return (x * y).sum(-1) / np.sqrt((x * x).sum(-1) * (y * y).sum(-1) + 1e-300)


def tail_scales(rng, draws: int, k: int) -> np.ndarray:
    """(draws, k) per-method scales of the simulated true pairs: draw d is bivariate t with TRUE_MEANS_TAILS[d mod
    len] degrees of freedom (unit variance; None: normal, scale 1), so the simulated studies mix the tails listed."""
    scales = np.ones((draws, k))
    for start, df in enumerate(TRUE_MEANS_TAILS):
        if df is not None:
            rows = slice(start, None, len(TRUE_MEANS_TAILS))
            scales[rows] = np.sqrt((df - 2) / rng.chisquare(df, scales[rows].shape))
    return scales


def simulated_statistics(parts: dict, maps: tuple, draws: int, seed: int) -> np.ndarray:
    """(grid, draws) statistic of simulated whitened means for every candidate ρ (common random numbers); NaN
    for a draw whose noise alone is wider than a metric's observed whitened spread."""
    rng = np.random.default_rng(seed)
    pool, means = noise_pool(parts), parts["means"]
    n, k = len(pool), len(means) // 2
    noise = damped(pool[rng.integers(0, n, size=(draws, n))].mean(1), pool)  # (draws, 2(k − 1)): noise_draws.py
    z1, z2 = rng.standard_normal((2, draws, k)) * tail_scales(rng, draws, k)
    rho = GRID[:, None, None]
    shape_y = rho * z1 + np.sqrt(1 - rho ** 2) * z2
    (map_x, map_y) = maps
    x = spread_to(z1 @ map_x.T, noise[:, :k - 1], float(np.sum((map_x @ means[:k]) ** 2)))  # the same for every ρ
    y = spread_to(shape_y @ map_y.T, noise[:, k - 1:], float(np.sum((map_y @ means[k:]) ** 2)))
    statistics = cosine(np.broadcast_to(np.nan_to_num(x), y.shape), np.nan_to_num(y))
    return np.where(np.isnan(x[..., 0]) | np.isnan(y[..., 0]), np.nan, statistics)


def crossing(p_values: np.ndarray, rejected: int, kept: int, alpha: float) -> float:
    """Where the p-value (or any value on the grid) crosses α between a rejected and a kept grid point, linear in
    Fisher z (the last kept point alone would cut the interval short by up to a grid step: 3.5 % per tail
    instead of 2.5 % at 20 methods, measured)."""
    z = np.arctanh(GRID[[rejected, kept]])
    p = p_values[[rejected, kept]]
    share = (alpha - p[0]) / (p[1] - p[0]) if p[1] != p[0] else 0.0
    return float(np.tanh(z[0] + share * (z[1] - z[0])))


def median_estimate(upper: np.ndarray, lower: np.ndarray) -> float:
    """The ρ at which the observed statistic is the simulated median (upper and lower tail shares equal, p = 1
    there), interpolated in Fisher z; ±1 where the observed statistic is beyond the median at every ρ. The
    moment estimate T_xy / √(T_xx T_yy) it replaces could fall outside the interval (news study: +1.00 beside
    [−0.60, +0.82])."""
    balance = upper - lower  # grows with ρ: larger ρ, more simulated statistics above the observed one
    above = np.flatnonzero(balance >= 0)
    if not len(above):
        return 1.0
    return -1.0 if above[0] == 0 else crossing(balance, above[0] - 1, above[0], 0.0)


def inverted_test(parts: dict, level: float, draws: int, seed: int) -> dict:
    """Point, low and high of ρ, the true means' correlation (low None where no ρ fits the data)."""
    k, n = len(parts["means"]) // 2, parts["centred"].shape[1]
    maps = [whitening(parts["means"][metric], np.cov(parts["centred"][metric]), n)
            for metric in (slice(0, k), slice(k, 2 * k))]
    observed = float(cosine(maps[0] @ parts["means"][:k], maps[1] @ parts["means"][k:]))
    simulated = simulated_statistics(parts, maps, draws, seed)
    valid = (~np.isnan(simulated)).sum(-1)
    upper = ((simulated > observed).sum(-1) + 1) / (valid + 1)
    lower = ((simulated < observed).sum(-1) + 1) / (valid + 1)
    p_values, rho = 2 * np.minimum(upper, lower), median_estimate(upper, lower)
    kept = np.flatnonzero(p_values > 1 - level)
    if not len(kept):
        return {"point": rho, "low": None, "high": None}
    low = -1.0 if kept[0] == 0 else crossing(p_values, kept[0] - 1, kept[0], 1 - level)
    high = 1.0 if kept[-1] == len(GRID) - 1 else crossing(p_values, kept[-1] + 1, kept[-1], 1 - level)
    if not low <= rho <= high:  # beyond the median at every ρ (a bound), the last grid points barely kept or not
        rho = float(GRID[kept[np.argmax(p_values[kept])]])  # the most compatible ρ kept
    return {"point": float(rho), "low": float(low), "high": float(high)}


def true_correlation(x_rows, y_rows, statistic: str, level: float = 0.95, draws: int = DRAWS, seed: int = 0) -> dict:
    """Interval for the correlation of the methods' true means; `x_rows`, `y_rows`: (methods, users)."""
    methods = len(x_rows)
    x_rows, y_rows = distinct_deployments(np.asarray(x_rows, float), np.asarray(y_rows, float))
    k, n = x_rows.shape
    out = {"low": None, "high": None, "point": None, "reliability": None, "users_needed": None, "level": level,
           "methods": methods, "distinct_methods": k}
    if n < MIN_NOISE_USERS or k < MIN_TRUE_METHODS:
        counted = f"{k} methods" if k == methods else f"{k} distinct of {methods} methods"
        return {**out, "reason": f"{n} users, {counted}: an interval needs {MIN_NOISE_USERS} users and "
                                 f"{MIN_TRUE_METHODS} methods"}
    parts = noise_parts(x_rows, y_rows)
    reliability = {key[0]: float(parts["T"][key] / parts["S"][key]) if parts["S"][key] > 0 else 0.0
                   for key in ("xx", "yy")}
    needed, bound = users_for(parts, n) or (None, False)
    out.update(reliability=reliability, users_needed=needed, users_needed_is_bound=bound,
               noise_correlation=noise_correlation(parts))
    if min(reliability.values()) < MIN_RELIABILITY:
        return {**out, "reason": "the methods differ by less than their measurement noise (reliability "
                                 f"{min(reliability.values()):.2f})"}
    interval = inverted_test(parts, level, draws, seed)
    if interval["low"] is None:
        return on_scale({**out, "point": interval["point"], "no_fit": True, "reason": "no correlation fits the data"},
                        statistic)
    return on_scale({**out, **interval, "reason": None, "procedure": PROCEDURE}, statistic)


def on_scale(result: dict, statistic: str) -> dict:
    """A result of `true_correlation` (its ρ) stated on another statistic's population scale: one interval of ρ
    serves the three, so a table computes it once."""
    ends = {key: None if result[key] is None else float(population_scale(statistic, result[key]))
            for key in ("point", "low", "high")}
    return {**result, **ends}
