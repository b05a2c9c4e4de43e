"""`persalign plan CONFIG --from-run RUN --choose-design`: the design the real data supports (issue #75).

Searches every item threshold (authors with ≥ t items; the data says how many), number of adaptation users
(at most half: the rest train the reward models), query items per user and seeds, and states per design:

- its cost: the stored run's measured seconds (one thread per cell, as the pool runs them) scaled per part:
  generation, scoring and metrics per query item (seeded cells also per seed), training and the λ choice
  per seed (their steps and validation items are fixed), adaptation per adaptation user and seed, the
  feature pass per pair; hours = those seconds ÷ the pool's workers (the full news study on 2 workers
  took 1.03 × that: docs/scale-out.md);
- Findings 1-2: each metric's reliability across methods (planner/noise_components.py);
- Finding 3: the ROUGE-1 difference it detects with 80 % power (planner/power.py).

The choice within a budget: the highest reliability of the weakest metric of Findings 1-2 (RM accuracy, policy
accuracy, ROUGE-1), then the smallest Finding-3 difference, then the fewest hours. Assumptions: the methods'
true spread and the noise per query stay those of the run (fewer train users may train weaker reward models),
and the adaptation users are drawn at random (each gives min(its items, the cap): the mean over the data's
authors sets the cost, the harmonic mean the noise). The chosen design's split is then made, and its real
users and items stated.

    persalign plan configs/study_news_full.yaml --from-run RUN --choose-design --budget-hours 2
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np

from persalign.analysis.paired import MIN_USERS

THRESHOLDS = (10, 15, 20)  # items per author the search tries (the config's own is added)
SEEDS = (1, 2, 3)
TRAIN_SHARE = 0.5  # at least this share of the authors trains the reward models (the paper: 80 %)
MAX_QUERIES = 40
GROWING = ("generation", "scoring", "metrics", "prompts")


@dataclass
class RunCost:
    """Seconds of a stored run by how they scale (one thread per cell)."""

    seeded_per_item: float  # per query item and seed (seeded cells)
    free_per_item: float  # per query item (seed-free cells: zero-shot, ICL-RAG)
    per_seed: float  # training and the λ choice
    per_user_seed: float  # adaptation
    per_pair: float  # the feature pass

    def seconds(self, items: int, users: int, seeds: int, pairs: int) -> float:
        return (items * (self.seeded_per_item * seeds + self.free_per_item) + self.per_seed * seeds
                + self.per_user_seed * users * seeds + self.per_pair * pairs)


def run_cost(run_dir, items: int, users: int, pairs: int) -> RunCost:
    """The run's measured seconds split by how they scale; `items`, `users`, `pairs`: the run's design."""
    from persalign.report.markdown import results_frame, stage_totals
    from persalign.runner.store import RunStore

    frame = results_frame(RunStore(run_dir))
    seeds = frame["seed"].nunique()
    growing = [(sum(stages.get(f"{name}_s", 0.0) for name in GROWING), bool(dep))
               for stages, dep in zip(frame["stage_seconds"], frame["seed_dependent"])]
    totals = stage_totals(frame)
    return RunCost(sum(s for s, dep in growing if dep) / (items * seeds),
                   sum(s for s, dep in growing if not dep) / items,
                   (totals.get("training", 0.0) + totals.get("λ choice", 0.0)) / seeds,
                   totals.get("adaptation", 0.0) / (users * seeds), totals.get("features", 0.0) / pairs)


@dataclass
class Reach:
    """What the data gives at one item threshold."""

    threshold: int
    authors: int
    eligible: list[int]  # query items each author would give as an adaptation user, most first (uncapped)
    pairs: int


def reach_of(config, threshold: int) -> Reach:
    from persalign.runner.counted_plan import design_of

    design = design_of(with_threshold(config, threshold))
    return Reach(threshold, design.users, sorted(design.eligible_queries.values(), reverse=True),
                 sum(design.pairs.values()) + design.query_items)


@dataclass
class Candidate:
    threshold: int
    authors: int
    users: int  # adaptation users
    queries: int  # the cap on query items per adaptation user (split.max_query_per_user)
    seeds: int
    items: float  # query items expected in all: users × the mean of min(items, cap) over the authors
    harmonic: float  # the harmonic mean of min(items, cap) over the authors: the queries the noise sees
    hours: float
    reliability: dict[str, float]
    detectable: float  # Finding 3, ROUGE-1 points at 80 % power

    @property
    def weakest(self) -> float:
        """The lowest reliability of the metrics Findings 1-2 correlate."""
        return min(self.reliability.values(), default=0.0)


def candidates(reach: Reach, noise, finding3, cost: RunCost, workers: int) -> list[Candidate]:
    """Every design at this threshold (adaptation users ≥ MIN_USERS, ≤ half the authors)."""
    from persalign.planner.power import detectable, harmonic_queries

    found = []
    for cap in range(1, min(max(reach.eligible), MAX_QUERIES) + 1):
        per_user = [min(e, cap) for e in reach.eligible]  # the split draws the adaptation users at random
        mean, harmonic = float(np.mean(per_user)), harmonic_queries(per_user)
        for users in range(MIN_USERS, int(reach.authors * (1 - TRAIN_SHARE)) + 1):
            for seeds in SEEDS:
                hours = cost.seconds(users * mean, users, seeds, reach.pairs) / workers / 3600
                found.append(Candidate(reach.threshold, reach.authors, users, cap, seeds, users * mean, harmonic, hours,
                                       {m: n.reliability(users, harmonic, seeds) for m, n in noise.metrics.items()},
                                       detectable(users, harmonic, finding3.between, finding3.within)))
    return found


def choose(designs: list[Candidate], budget_hours: float | None) -> Candidate | None:
    """The design the search picks: the weakest reliability of Findings 1-2, then F3's detectable difference,
    then hours."""
    fitting = [d for d in designs if budget_hours is None or d.hours <= budget_hours]
    return min(fitting, key=lambda d: (-round(d.weakest, 2), round(d.detectable, 1), d.hours), default=None)


def overrides_of(design: Candidate) -> list[str]:
    return [f"data.min_items_per_user={design.threshold}",
            f"split.adapt_fraction={design.users / design.authors:.3f}",
            f"split.max_query_per_user={design.queries}", f"seeds={list(range(design.seeds))}"]


def with_design(config, d: Candidate):
    """The config with the design's threshold, split and seeds (what `overrides_of` sets)."""
    split = dataclasses.replace(config.split, adapt_fraction=round(d.users / d.authors, 3),
                                max_query_per_user=d.queries)
    return dataclasses.replace(with_threshold(config, d.threshold), split=split, seeds=list(range(d.seeds)))


def with_threshold(config, threshold: int):
    return dataclasses.replace(config, data=dataclasses.replace(config.data, min_items_per_user=threshold))


def fisher_halfwidth(methods: int) -> float:
    """The half-width of a 95 % interval of a correlation 0 over `methods` exact means (Fisher z)."""
    return math.tanh(1.959964 / math.sqrt(methods - 3)) if methods > 3 else 1.0


def choice_report(config, run_dir: str, budget_hours: float | None, workers: int) -> str:
    """The search's table (the best design per threshold and seeds), its choice, and what each finding needs."""
    from persalign.planner.noise_components import run_components
    from persalign.planner.power import components_from_run
    from persalign.runner.counted_plan import design_of

    noise, finding3 = run_components(run_dir), components_from_run(run_dir)
    if noise is None or finding3 is None or not {"rm_accuracy", "policy_accuracy"} <= set(noise.metrics):
        return (f"--choose-design: {run_dir} has no two reward methods with RM and policy accuracy beside an ICL "
                "cell: nothing to measure the noise on")
    run_design = design_of(config)
    cost = run_cost(run_dir, run_design.query_items, len(run_design.queries),
                    sum(run_design.pairs.values()) + run_design.query_items)
    reaches = [reach_of(config, t) for t in sorted({*THRESHOLDS, config.data.min_items_per_user})]
    designs = [d for reach in reaches for d in candidates(reach, noise, finding3, cost, workers)]
    lines = [f"Choosing the design (noise and seconds of {run_dir}: {noise.users} users × {noise.queries:.1f} "
             f"queries × {noise.seeds} seeds, {len(noise.methods)} reward methods; {workers} workers)", "",
             "| items per author | authors | adaptation users × queries × seeds | hours | reliability RM acc / "
             "policy acc / ROUGE-1 | Finding 3 detects (ROUGE-1) |", "|---|---|---|---|---|---|"]
    for reach in reaches:
        for seeds in SEEDS:
            best = choose([d for d in designs if d.threshold == reach.threshold and d.seeds == seeds], budget_hours)
            lines += [design_row(best)] if best else []
    chosen = choose(designs, budget_hours)
    lines += [""] + (chosen_lines(config, chosen, budget_hours) if chosen
                     else [no_design_line(designs, reaches, budget_hours)])
    at = (chosen.harmonic, chosen.seeds) if chosen else (noise.queries, noise.seeds)
    return "\n".join(lines + [""] + needs_lines(noise, finding3, at, reaches))


def no_design_line(designs: list[Candidate], reaches: list[Reach], budget_hours: float | None) -> str:
    if designs:
        return f"no design with {MIN_USERS}+ adaptation users fits {budget_hours:g} h"
    most = max(r.authors for r in reaches)
    return (f"no design: {MIN_USERS} adaptation users are needed beside as many training the reward models, and this "
            f"data has {most} authors at ≥ {min(r.threshold for r in reaches)} items")


def design_row(d: Candidate) -> str:
    r = d.reliability
    return (f"| {d.threshold} | {d.authors} | {d.users} × {d.queries} × {d.seeds} | {d.hours:.2f} | "
            f"{r.get('rm_accuracy', 0):.2f} / {r.get('policy_accuracy', 0):.2f} / {r.get('rouge1', 0):.2f} | "
            f"{d.detectable:.1f} |")


def chosen_lines(config, d: Candidate, budget_hours: float | None) -> list[str]:
    """The choice, its overrides, and the split they really make (users drawn at random: its own items)."""
    from persalign.runner.counted_plan import design_of

    within = f"within {budget_hours:g} h" if budget_hours else "with no budget (the most the data gives)"
    overrides = overrides_of(d)
    made = design_of(with_design(config, d))
    real = f"; its split: {len(made.queries)} adaptation users, {made.query_items} query items (planned {d.items:.0f})"
    return [f"chosen {within}: {d.threshold}+ items per author ({d.authors} authors), {d.users} adaptation users × "
            f"≤ {d.queries} queries × {d.seeds} seeds, {d.hours:.2f} h{real}; set " + " ".join(overrides)]


def reading(found: tuple | None, seeds: int, seeds_needed: int | None) -> str:
    if found is None:
        return "none (the methods' means do not differ)"
    users, bound = found
    if users is None:
        return (f"out of reach with {seeds} seed{'s' * (seeds > 1)} (the seeds' shifts of the methods alone keep it "
                f"below; {seeds_needed} seeds would not)")
    return f"{'≥ ' if bound else ''}{users} users"


def needs_lines(noise, finding3, at: tuple[float, int], reaches: list[Reach]) -> list[str]:
    """The users each finding needs at `at` = (queries per user, harmonic mean; seeds), and what the data can
    reach."""
    from persalign.analysis.power import DEFAULT_GAP, users_needed
    from persalign.planner.noise_components import FINDING_PAIRS

    q, s = at
    lines = [f"What each finding needs at {q:.1f} queries per user (harmonic mean) and {s} seeds:"]
    for finding, metrics in FINDING_PAIRS.items():
        parts = []
        for metric in metrics:
            for target in (0.5, 0.8):
                found = noise.metrics[metric].users_for(target, q, s) if metric in noise.metrics else None
                seeds = noise.metrics[metric].seeds_for(target) if metric in noise.metrics else None
                parts.append(f"{metric} reliability {target:g}: " + reading(found, s, seeds))
        lines.append(f"- {finding}: " + "; ".join(parts))
    sd = math.sqrt(finding3.between ** 2 + finding3.within ** 2 / q)
    needed = users_needed(DEFAULT_GAP, sd)
    lines.append(f"- Finding 3: a {DEFAULT_GAP:g}-point ROUGE-1 gap needs " + (f"≈ {needed} users" if needed else
                 "more than 100,000 users (the users' spread is that large)"))
    most = max(int(r.authors * (1 - TRAIN_SHARE)) for r in reaches)
    lines.append(f"- this data: at most {most} adaptation users (half of the "
                 f"{max(r.authors for r in reaches)} authors with ≥ {min(r.threshold for r in reaches)} items)")
    k = noise.distinct_methods
    lines.append(f"- Finding 1 across {k} distinct methods: even exact means give a 95 % interval of ±"
                 f"{fisher_halfwidth(k):.2f} around a correlation of 0 (Fisher z), so 'unrelated' reads at best "
                 "'bounded below' that; more methods, not more users, narrow it further")
    return lines
