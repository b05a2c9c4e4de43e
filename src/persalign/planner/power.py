"""What a study design can detect: variance components, the detectable difference, the best split in a budget.

Finding 3 compares the best ICL variant with the best reward method on per-user
mean differences of ROUGE-1. With U adaptation users of Q query items each,
a user's mean difference has variance σ_b² + σ_w²/Q (σ_b: how users differ in
the true difference; σ_w: how a user's queries scatter around it), and the
procedure detects, with 80 % power, the difference of a paired t-test over U
users (analysis/power.py; tests/test_paired.py checks it against the
procedure's simulated power). The components come from a stored run's rows
(one-way random-effects ANOVA on the per-query differences of its Finding-3
pair, or best ICL − zero-shot where no reward method steers), else from
stated defaults. A proposal searches users × queries for the smallest
detectable difference whose projected hours fit the budget.

    python -c "from persalign.planner.power import detectable; print(detectable(16, 2, 8.0, 18.0))"
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass

import numpy as np

from persalign.analysis.paired import MIN_USERS
from persalign.analysis.power import detectable_difference

# Stated defaults (ROUGE-1 points) when no run is given: measured on the demo's Finding-3 pair, ICL-RAG (4-shot)
# − PAL (`persalign plan demo --from-run runs/demo/demo`): between users 7.5, within a user 19.9.
DEFAULT_BETWEEN, DEFAULT_WITHIN = 7.5, 19.9


@dataclass
class Components:
    between: float  # sd of users' true mean differences
    within: float  # sd of one query's difference around its user's mean
    source: str  # where they come from


def detectable(users: int, queries: float, between: float, within: float) -> float:
    """The difference Finding 3 detects with 80 % power at `users` × `queries` (nan below MIN_USERS)."""
    if users < MIN_USERS:
        return float("nan")
    return detectable_difference(float(np.sqrt(between ** 2 + within ** 2 / max(queries, 1))), users)


def variance_components(groups: list[np.ndarray]) -> tuple[float, float]:
    """(σ_b², σ_w²) by one-way random-effects ANOVA, σ_b² unclipped: (MSB − MSW) / n₀ with n₀ = (N − Σnᵢ²/N) /
    (k − 1), unbiased with unequal queries per user (the arithmetic mean of nᵢ in place of n₀ over-stated σ_b:
    8.85 for a true 7.5 in 16 × 2 designs; tests/test_planning.py)."""
    sizes = np.array([len(g) for g in groups], dtype=float)
    total, k = sizes.sum(), len(groups)
    grand = math.fsum(float(g.sum()) for g in groups) / total  # fsum: the same on every Python (3.12's sum differs)
    within = math.fsum(float(((g - g.mean()) ** 2).sum()) for g in groups) / (total - k) if total > k else 0.0
    between_mean_square = math.fsum(len(g) * (float(g.mean()) - grand) ** 2 for g in groups) / (k - 1)
    n0 = (total - float((sizes ** 2).sum()) / total) / (k - 1)
    return (between_mean_square - within) / n0, within


def harmonic_queries(counts) -> float:
    """The queries per user that give a user mean's average variance σ_b² + σ_w² · mean(1/nᵢ) (0 without users)."""
    counts = [c for c in counts if c > 0]
    return len(counts) / math.fsum(1 / c for c in counts) if counts else 0.0


def components_from_rows(first: list[dict], second: list[dict], source: str) -> Components | None:
    """σ_b and σ_w of per-query ROUGE-1 differences first − second (rows paired by query id)."""
    by_id = {r["id"]: r for r in second if r.get("rouge1") is not None}
    per_user: dict[str, list[float]] = defaultdict(list)
    for row in first:
        if row.get("rouge1") is not None and row["id"] in by_id:
            per_user[row["user"]].append(row["rouge1"] - by_id[row["id"]]["rouge1"])
    groups = [np.array(v) for v in per_user.values() if v]
    if len(groups) < 2:
        return None
    between, within = variance_components(groups)
    return Components(float(np.sqrt(max(0.0, between))), float(np.sqrt(within)), source)


def components_from_run(run_dir) -> Components | None:
    """The variance components of a stored run's Finding-3 pair (best ICL vs best steering reward method),
    or best ICL vs zero-shot where no reward method steers; each deployment's first seed."""
    from persalign.analysis.study import analyse
    from persalign.runner.store import Cell, RunStore

    store = RunStore(run_dir)
    for analysis in analyse(run_dir):
        reference = next((m for m in analysis.methods if m.properties.get("reference_baseline")), None)
        other = analysis.best_reward or reference
        if analysis.best_icl is None or other is None:
            continue
        rows = [store.read_rows(Cell(analysis.policy, m.decoder, m.seed_numbers[0]))
                for m in (analysis.best_icl, other)]
        return components_from_rows(*rows, f"{run_dir}: {analysis.best_icl.label} − {other.label}")
    return None


def propose(components: Components, eligible: list[int], hours_of, budget_hours: float) -> list[dict]:
    """Designs (users, queries per user) in the budget, smallest detectable difference first.

    `eligible`: each candidate adaptation user's available query items, most first; `hours_of(users, items)`
    projects a design's hours."""
    designs = []
    for users in range(MIN_USERS, len(eligible) + 1):
        for queries in range(1, eligible[users - 1] + 1):
            hours = hours_of(users, users * queries)
            if hours <= budget_hours:
                designs.append({"users": users, "queries": queries, "hours": hours,
                                "detectable": detectable(users, queries, components.between, components.within)})
    return sorted(designs, key=lambda d: (d["detectable"], d["hours"]))
