"""How the noise in the methods' means falls with users, queries and seeds: the planner's model for Findings 1-2.

Findings 1 and 2 read the correlation of the methods' TRUE means across methods (analysis/true_correlation.py).
What decides whether it can be read is each metric's reliability across methods, R = T / (T + noise): T the
true spread of the methods' means, the noise what users and seeds add to it. From a stored run's per-query rows:

    noise(U, q, s) = v_method_seed / s + N_run · (U_run / U) · p(q, s) / p(q_run, S),
    p(q, s) = v_user + (v_item + v_seed / s) / q

with U adaptation users, q query items each, s seeds. The v's are variance components of the method
contrasts (a method's value minus the methods' mean on the same query and seed: a user or query effect
common to every method cancels out of a correlation across methods), summed over methods ÷ (k − 1), the
same across-method share as `noise_parts`' N:

- v_method_seed: how a seed shifts a method's mean over all its queries (its trained model and λ), and
  v_seed: a query's own spread over seeds (two-way ANOVA of seeds × queries per method);
- v_item + v_seed / S: the spread of a user's seed-averaged queries around the user's mean (S the run's seeds);
- v_user: the spread of users' true means (one-way random-effects ANOVA, unbiased with unequal queries:
  planner/power.py `variance_components`).

N_run is the run's own user noise (`noise_parts`, as the report's reliability): the components only say how it
scales, each clipped at 0 (a negative v_user, sampling noise around 0, would let N reach 0 at many queries).
With them unclipped p(q_run, S) / U_run is N_run in expectation (tests/test_design_choice.py checks it).
The report counts a seed's shift of a method as part of that trained method's true mean; the planner counts
it as noise (Finding 1 is about methods, not training draws): T = S_observed − N_run − v_method_seed / S,
so its reliability at the run's own design is at most the report's. Where T ≤ 0 the reliability reads 0 at
every design, and `users_for` takes the whole observed spread as true: the users it finds are a lower bound.

    python -c "from persalign.planner.noise_components import run_components as c; print(c('runs/study'))"
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from persalign.analysis.true_correlation import noise_parts
from persalign.planner.power import harmonic_queries, variance_components

FINDING_PAIRS = {"Finding 1": ("rm_accuracy", "policy_accuracy"), "Finding 2": ("policy_accuracy", "rouge1")}
COLUMNS = {"rm_accuracy": ("rm_correct", 100.0), "policy_accuracy": ("policy_correct", 100.0),
           "rouge1": ("rouge1", 1.0)}


@dataclass
class MetricNoise:
    """One metric's noise components across k methods (metric units²) and its true spread at the run."""

    v_user: float
    v_item: float
    v_seed: float  # a query's spread over seeds beyond its method's shift
    v_method_seed: float  # a seed's shift of a method's mean
    observed_spread: float  # S: the observed means' variance across methods
    user_noise: float  # N_run: what the users' noise adds to S at the run's design
    methods: int
    run_design: tuple[int, float, int]  # the run's (users, harmonic queries, seeds)

    @property
    def true_spread(self) -> float:
        """T: the variance of the methods' true means across methods (≤ 0 where the noise explains it all)."""
        return self.observed_spread - self.user_noise - max(self.v_method_seed, 0.0) / self.run_design[2]

    def per_user(self, queries: float, seeds: int) -> float:
        """p(q, s): one user's contribution to the noise (clipped components)."""
        clip = lambda v: max(v, 0.0)  # noqa: E731
        return clip(self.v_user) + (clip(self.v_item) + clip(self.v_seed) / seeds) / queries

    def noise(self, users: float, queries: float, seeds: int) -> float:
        """N(U, q, s): the noise's share of the method means' spread across methods, anchored at the run's N."""
        run_users, run_queries, run_seeds = self.run_design
        base = self.per_user(run_queries, run_seeds)
        users_part = self.user_noise * run_users / users * self.per_user(queries, seeds) / base if base > 0 else 0.0
        return users_part + max(self.v_method_seed, 0.0) / seeds

    def reliability(self, users: float, queries: float, seeds: int) -> float:
        """T / (T + noise) at the design; 0 where the run measured no true spread (its noise explains it all)."""
        true = self.true_spread
        return true / (true + self.noise(users, queries, seeds)) if true > 0 else 0.0

    def users_for(self, target: float, queries: float, seeds: int) -> tuple[int | None, bool] | None:
        """(users at which the reliability reaches `target`, whether only a lower bound: T ≤ 0 here, so the
        whole observed spread was taken as true); users None where no number of users reaches it with `seeds`
        seeds (the seeds' shifts alone keep it below); None where the methods' means do not differ at all."""
        bound = self.true_spread <= 0
        true = self.observed_spread if bound else self.true_spread
        if true <= 0:
            return None
        room = true * (1 - target) / target - max(self.v_method_seed, 0.0) / seeds
        per_user = self.noise(1, queries, seeds) - max(self.v_method_seed, 0.0) / seeds
        return (math.ceil(per_user / room - 1e-9) if room > 0 else None), bound  # 1e-9: 52.000…01 is 52


    def seeds_for(self, target: float) -> int | None:
        """The fewest seeds with which enough users reach `target` (the seeds' shifts alone stay below it)."""
        true = self.true_spread if self.true_spread > 0 else self.observed_spread
        if true <= 0:
            return None
        room = true * (1 - target) / target
        return max(1, math.floor(max(self.v_method_seed, 0.0) / room) + 1)


def metric_noise(values: np.ndarray, users: list[str]) -> MetricNoise:
    """Components of `values` (k methods, S seeds, J queries; `users[j]` the user of query j)."""
    k, seeds, queries = values.shape
    centred = values - values.mean(axis=0, keepdims=True)
    per_seed, shifts = seed_components(centred)
    averaged = centred.mean(axis=1)  # (k, J)
    index = {user: [j for j, u in enumerate(users) if u == user] for user in sorted(set(users))}
    between, within = [], []
    for m in range(k):
        b, w = variance_components([averaged[m, columns] for columns in index.values()])
        between.append(b)
        within.append(w - per_seed[m] / seeds)
    user_means = np.stack([averaged[:, columns].mean(axis=1) for columns in index.values()], axis=1)  # (k, U)
    parts = noise_parts(user_means, user_means)
    scale = 1.0 / (k - 1)
    counts = [len(columns) for columns in index.values()]
    return MetricNoise(scale * math.fsum(between), scale * math.fsum(within), scale * float(per_seed.sum()),
                       scale * float(shifts.sum()), float(parts["S"]["xx"]), float(parts["N"]["xx"]), k,
                       (len(index), harmonic_queries(counts), seeds))


def seed_components(centred: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per method (k,): a query's spread over seeds beyond the method's shift (the seeds × queries interaction),
    and the variance of a seed's shift of the method's mean; zeros with one seed (nothing to measure)."""
    k, seeds, queries = centred.shape
    if seeds < 2 or queries < 2:
        return np.zeros(k), np.zeros(k)
    seed_means, query_means = centred.mean(axis=2), centred.mean(axis=1)
    residual = centred - seed_means[:, :, None] - query_means[:, None, :] + centred.mean(axis=(1, 2))[:, None, None]
    interaction = (residual ** 2).sum(axis=(1, 2)) / ((seeds - 1) * (queries - 1))
    return interaction, seed_means.var(axis=1, ddof=1) - interaction / queries


def query_values(store, methods, column: str, scale: float) -> tuple[np.ndarray, list[str], list[str]] | None:
    """(values (k, S, J), the user of each query, the query ids) of `column` for every method and seed on the
    queries every method and seed scored; None without two methods, or with unequal seed counts."""
    from persalign.runner.store import Cell

    tables = []
    for method in methods:
        seeds = []
        for seed in method.seed_numbers:
            rows = store.read_rows(Cell(method.policy, method.decoder, seed))
            seeds.append({r["id"]: (r["user"], scale * float(r[column])) for r in rows if r.get(column) is not None})
        tables.append(seeds)
    if len(tables) < 2 or len({len(t) for t in tables}) != 1:
        return None
    ids = sorted(set.intersection(*(set(seed) for t in tables for seed in t)))
    if not ids:
        return None
    values = np.array([[[seed[i][1] for i in ids] for seed in t] for t in tables])
    return values, [tables[0][0][i][0] for i in ids], ids


@dataclass
class RunNoise:
    """A stored run's noise components per metric, for the reward methods Findings 1-2 correlate."""

    metrics: dict[str, MetricNoise]
    users: int
    queries: float  # harmonic mean of the query items per user
    seeds: int
    methods: list[str]
    distinct_methods: int  # methods left once those that chose λ = 0 in every seed are one greedy deployment
    source: str


def run_components(run_dir, policy: str | None = None) -> RunNoise | None:
    """The components of a finished run's reward methods (those Findings 1-2 correlate: deployed by decoding,
    with RM accuracy); None where fewer than two such methods have rows."""
    from persalign.analysis.study import load_results
    from persalign.runner.store import RunStore

    store, results = RunStore(run_dir), load_results(run_dir)
    policy = policy or next(iter(results), None)
    methods = [m for m in results.get(policy, []) if m.decodes_with_learnt_part and m.user_means.get("rm_accuracy")]
    found, users = {}, None
    for metric, (column, scale) in COLUMNS.items():
        table = query_values(store, methods, column, scale)
        if table is not None:
            found[metric] = metric_noise(table[0], table[1])
            users = table[1]
    if users is None:
        return None
    counts = [users.count(u) for u in set(users)]
    switched = sum(m.switched_off for m in methods)
    return RunNoise(found, len(counts), harmonic_queries(counts), len(methods[0].seed_numbers),
                    [m.label for m in methods], len(methods) - switched + (1 if switched else 0), f"{run_dir}")
