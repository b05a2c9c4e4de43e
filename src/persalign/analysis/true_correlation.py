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
- the interval inverts a test: for each candidate ρ (a grid in Fisher-z) the observed statistic's
  distribution is simulated with noise drawn by resampling the users (their centred rows, scaled to C) and
  true means of correlation ρ (a bivariate normal's shape) scaled so that each metric's simulated means
  spread exactly as the observed ones do: the observed spread S is known, only its split into true
  differences and noise is not (letting it vary, as plugging in T did, made the test too wide at ρ = 0.9:
  docs/design-notes.md); a ρ whose p-value ≥ 5 % is kept (α split equally between the tails, save where a rank
  statistic's pile at ±1 leaves a tail unable to reject anything: `tail_p_values`). Common random numbers
  across the grid keep the accepted set an interval. It is stated on each statistic's population scale
  (Pearson ρ; Spearman (6/π) asin(ρ/2); Kendall (2/π) asin ρ).

The noise correlation between the two metrics is reported beside the reliabilities: the coverage grid was
measured at 0.3 (the news study measures 0.07-0.22); at 0.6 with reliability 0.3 the interval reads the noise
the metrics share as correlation (coverage 0.895-0.929, docs/design-notes.md), and the report says so. So
does it where the methods err together (their noise spans under SHARED_NOISE_SHARE of the k − 1 directions
independent methods' noise would: methods in pairs whose noise correlates 0.9 took coverage to 0.865-0.927 at
reliability 0.3), as on the news study, where the methods that chose λ = 0 all decode greedily.

No interval where a metric's true spread is estimated ≤ 0 or its reliability below MIN_RELIABILITY ("the
methods differ by less than their measurement noise"), with the users that would reach it (where a metric
shows no true spread, a lower bound: its whole observed spread taken as real); none below
MIN_NOISE_USERS users (the noise is then unmeasured) or MIN_TRUE_METHODS methods (coverage unmeasured).
Coverage by simulation: tests/test_true_correlation.py, docs/design-notes.md.

    pytest tests/test_true_correlation.py          # its coverage, simulated at the sizes users run
"""

from __future__ import annotations

import numpy as np

MIN_NOISE_USERS = 8  # users below which the noise covariance is not estimated (the means' intervals need as many)
MIN_TRUE_METHODS = 6  # the fewest methods the coverage was measured at (docs/design-notes.md)
MIN_RELIABILITY = 0.2  # below it no interval kept its coverage in the simulation (docs/design-notes.md)
MEASURED_NOISE_CORRELATION = 0.3  # the metrics' noise correlation the grid was measured at (no cell below the band);
# at 0.6 and reliability 0.3 coverage fell to 0.895-0.929, shared noise read as correlation (design-notes.md)
# How far below its band the interval fell where the methods err together, by the share of independent directions
# their noise spans (`independent_noise_share`; independent methods read 0.77-1.15, the news study 0.17-0.54):
# (below this share, the coverage measured there; design-notes.md "Methods that err together").
SHARED_NOISE_COVERAGE = (
    (0.3, "77-81 % at reliability 0.3, 92-94 % at 0.5"),  # groups of 5 of 10 methods, noise correlated 0.95: ~0.16
    (0.7, "86-93 % at reliability 0.3, 91-93 % at 0.5"),  # pairs, noise correlated 0.9: ~0.5 (0.38-0.60); the grid
)
SHARED_NOISE_SHARE = SHARED_NOISE_COVERAGE[-1][0]  # below it the report says the methods' noise is shared
GRID = np.tanh(np.linspace(-3.5, 3.5, 71))  # candidate ρ, even in Fisher-z
PROCEDURE = "test inversion, true means normal at the observed spread, noise by resampling users"


def population_scale(statistic: str, rho):
    """The statistic's value for a bivariate normal of correlation ρ."""
    rho = np.asarray(rho, dtype=float)
    return {"pearson": lambda: rho, "spearman": lambda: 6 / np.pi * np.arcsin(rho / 2),
            "kendall": lambda: 2 / np.pi * np.arcsin(rho)}[statistic]()


def batch_statistic(statistic: str, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """The statistic of every row pair of x, y (..., k): Pearson, Spearman or Kendall's τ-b."""
    if statistic == "spearman":
        x, y = (np.argsort(np.argsort(v, -1), -1).astype(float) for v in (x, y))
    if statistic in ("pearson", "spearman"):
        x, y = x - x.mean(-1, keepdims=True), y - y.mean(-1, keepdims=True)
        return (x * y).sum(-1) / np.sqrt((x * x).sum(-1) * (y * y).sum(-1) + 1e-300)
    i, j = np.triu_indices(x.shape[-1], 1)
    sx, sy = np.sign(x[..., j] - x[..., i]), np.sign(y[..., j] - y[..., i])
    return (sx * sy).sum(-1) / np.sqrt((sx != 0).sum(-1) * (sy != 0).sum(-1) + 1e-300)


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


def independent_noise_share(parts: dict) -> float | None:
    """How independently the methods err: each metric's noise across the methods spans (tr M)² / tr M² effective
    directions (M its covariance over the method-centred means; tr M² estimated without the upward bias of a
    small sample of users: unbiased under normal noise) — k − 1 where methods err independently; the smaller
    share of k − 1 of the two metrics. None without noise or where tr M² is not estimable (its estimate ≤ 0)."""
    k2, n = parts["centred"].shape
    k, shares, degrees = k2 // 2, [], n - 1
    if degrees < 2 or k < 2:
        return None
    for rows in (parts["centred"][:k], parts["centred"][k:]):
        centred = rows - rows.mean(0, keepdims=True)  # a user effect common to every method cancels
        scatter = centred @ centred.T  # (n − 1) × the per-user covariance: Wishart with n − 1 df
        trace = np.trace(scatter)
        square = (np.trace(scatter @ scatter) - trace ** 2 / degrees) / ((degrees - 1) * (degrees + 2))
        if trace <= 0 or square <= 0:
            return None
        shares.append((trace / degrees) ** 2 / square / (k - 1))
    return float(min(shares))


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


def spread_to(shape: np.ndarray, noise: np.ndarray, spread: float) -> np.ndarray:
    """True means of the given shape, scaled so that true + noise has the observed spread (sample variance across
    methods): the positive root of var(c·shape + noise) = spread; NaN where no scale reaches it (the noise
    drawn is then wider than the data allow)."""
    k = shape.shape[-1]
    shape, noise = shape - shape.mean(-1, keepdims=True), noise - noise.mean(-1, keepdims=True)
    a, b = (shape * shape).sum(-1), 2 * (shape * noise).sum(-1)
    c = (noise * noise).sum(-1) - (k - 1) * spread
    discriminant = b * b - 4 * a * c
    scale = (-b + np.sqrt(np.where(discriminant >= 0, discriminant, np.nan))) / (2 * a)
    return np.where(scale > 0, scale, np.nan)[..., None] * shape + noise


def simulated_statistics(statistic: str, parts: dict, draws: int, seed: int) -> np.ndarray:
    """(grid, draws) statistic of simulated observed means for every candidate ρ (common random numbers); NaN
    for a draw whose noise alone is wider than a metric's observed spread."""
    rng = np.random.default_rng(seed)
    centred = parts["centred"]
    k2, n = centred.shape
    k = k2 // 2
    pick = rng.integers(0, n, size=(draws, n))
    noise = centred[:, pick].mean(-1).T * np.sqrt(n / (n - 1))  # (draws, 2k): a bootstrap mean's var is C·(n−1)/n
    z1, z2 = rng.standard_normal((2, draws, k))
    rho = GRID[:, None, None]
    shape_y = rho * z1 + np.sqrt(1 - rho ** 2) * z2
    x = spread_to(z1, noise[:, :k], parts["S"]["xx"])  # (draws, k): the same for every ρ
    y = spread_to(shape_y, noise[:, k:], parts["S"]["yy"])
    statistics = batch_statistic(statistic, np.broadcast_to(np.nan_to_num(x), y.shape), np.nan_to_num(y))
    return np.where(np.isnan(x[..., 0]) | np.isnan(y[..., 0]), np.nan, statistics)


def crossing(p_values: np.ndarray, rejected: int, kept: int, alpha: float) -> float:
    """Where the p-value (or any value on the grid) crosses α between a rejected and a kept grid point, linear in
    Fisher z (the last kept point alone would cut the interval short by up to a grid step: 3.5 % per tail
    instead of 2.5 % at 20 methods, measured)."""
    z = np.arctanh(GRID[[rejected, kept]])
    p = p_values[[rejected, kept]]
    share = (alpha - p[0]) / (p[1] - p[0]) if p[1] != p[0] else 0.0
    return float(np.tanh(z[0] + share * (z[1] - z[0])))


def tail_p_values(simulated: np.ndarray, upper: np.ndarray, lower: np.ndarray, alpha: float) -> np.ndarray:
    """Each candidate ρ's two-sided p-value, α split equally between the tails — except where a tail can reject
    nothing: over few methods a rank statistic at ρ near ±1 piles onto ±1 (Kendall's τ = 1 in > 5 % of draws at 6
    methods, reliability 0.9, ρ 0.9), so even the most extreme observation keeps that tail's mid-p above α/2. That
    ρ's whole α goes to the other tail. The split is a property of the candidate ρ's own distribution, not of the
    observed value, so each test keeps its size (unlike switching on the observed interval reaching ±1, measured
    in docs/design-notes.md); it moved Spearman 6 / 0.9 / 0.9 from 0.976 to 0.967, Kendall 0.979 to 0.972."""
    valid = (~np.isnan(simulated)).sum(-1) + 1
    pile = {end: (0.5 * (np.abs(simulated - end) <= 1e-12).sum(-1) + 1) / valid > alpha / 2 for end in (1, -1)}
    p_values = 2 * np.minimum(upper, lower)
    p_values = np.where(pile[1] & ~pile[-1], np.minimum(lower, 2 * upper), p_values)  # the upper tail rejects nothing
    return np.where(pile[-1] & ~pile[1], np.minimum(upper, 2 * lower), p_values)


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


def true_correlation(x_rows, y_rows, statistic: str, level: float = 0.95, draws: int = 199, seed: int = 0) -> dict:
    """Interval for the correlation of the methods' true means; `x_rows`, `y_rows`: (methods, users)."""
    x_rows, y_rows = np.asarray(x_rows, float), np.asarray(y_rows, float)
    k, n = x_rows.shape
    out = {"low": None, "high": None, "point": None, "reliability": None, "users_needed": None, "level": level}
    if n < MIN_NOISE_USERS or k < MIN_TRUE_METHODS:
        return {**out, "reason": f"{n} users, {k} methods: an interval needs {MIN_NOISE_USERS} users and "
                                 f"{MIN_TRUE_METHODS} methods"}
    parts = noise_parts(x_rows, y_rows)
    reliability = {key[0]: float(parts["T"][key] / parts["S"][key]) if parts["S"][key] > 0 else 0.0
                   for key in ("xx", "yy")}
    needed, bound = users_for(parts, n) or (None, False)
    out.update(reliability=reliability, users_needed=needed, users_needed_is_bound=bound,
               noise_correlation=noise_correlation(parts), independent_noise_share=independent_noise_share(parts))
    if min(reliability.values()) < MIN_RELIABILITY:
        return {**out, "reason": "the methods differ by less than their measurement noise (reliability "
                                 f"{min(reliability.values()):.2f})"}
    observed = float(batch_statistic(statistic, x_rows.mean(1), y_rows.mean(1)))
    simulated = simulated_statistics(statistic, parts, draws, seed)
    valid = (~np.isnan(simulated)).sum(-1)
    tied = 0.5 * (np.abs(simulated - observed) <= 1e-12).sum(-1)  # mid-p: Kendall over few methods is discrete
    upper = ((simulated > observed + 1e-12).sum(-1) + tied + 1) / (valid + 1)
    lower = ((simulated < observed - 1e-12).sum(-1) + tied + 1) / (valid + 1)
    p_values = tail_p_values(simulated, upper, lower, 1 - level)
    rho = median_estimate(upper, lower)
    kept = np.flatnonzero(p_values > 1 - level)
    if not len(kept):
        return {**out, "point": float(population_scale(statistic, rho)), "reason": "no correlation fits the data"}
    low = -1.0 if kept[0] == 0 else crossing(p_values, kept[0] - 1, kept[0], 1 - level)
    high = 1.0 if kept[-1] == len(GRID) - 1 else crossing(p_values, kept[-1] + 1, kept[-1], 1 - level)
    if not low <= rho <= high:  # beyond the median at every ρ (a bound), the last grid points barely kept or not
        rho = float(GRID[kept[np.argmax(p_values[kept])]])  # the most compatible ρ kept
    return {**out, "point": float(population_scale(statistic, rho)), "low": float(population_scale(statistic, low)),
            "high": float(population_scale(statistic, high)), "reason": None, "procedure": PROCEDURE}
