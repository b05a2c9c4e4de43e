"""The verdict a practitioner can act on: deployments ranked by how close they write to the users' own text.

For each policy: every deployment with its ROUGE-1 against the users' own
text and its policy accuracy (95% bootstrap CIs over adaptation users), and
what it costs: seconds to adapt one new user (training.adapt_s ÷ adaptation
users) and generation seconds per generated token relative to greedy decoding
(the zero-shot cell). Best-of-N draws N samples per output, so its cost is
stated as N (the samples are shared by every method and timed in one cell
only). The Pareto front is the set no other deployment beats on both quality
and cost. The sentence under the table is generated from these numbers; where
the interval of "best ICL variant − best reward method" includes 0 it says the
data cannot separate them.

    persalign report runs/demo/demo   # the verdict opens every report with generations
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from persalign.analysis.study import PolicyAnalysis
from persalign.report.study_sections import interval_text, power_text, winners
from persalign.runner.store import Cell, RunStore


@dataclass
class VerdictRow:
    label: str
    quality: dict  # ROUGE-1 metric_ci
    policy_accuracy: dict | None
    adapt_s_per_user: float | None  # None: nothing is adapted (reward-free)
    relative_cost: float | None  # generation cost ÷ greedy's
    cost_basis: str  # "per token", "per output" (runs without token counts) or "N samples"
    pareto: bool = False


def _generation_cost(store: RunStore, cells: pd.DataFrame) -> tuple[float | None, str]:
    """Generation seconds per token (per output where rows carry no token counts) over a deployment's cells."""
    seconds, tokens, outputs = 0.0, 0, 0
    for _, cell in cells.iterrows():
        rows = store.read_rows(Cell(cell["policy"], cell["decoder"], int(cell["seed"])))
        seconds += float((cell["stage_seconds"] or {}).get("generation_s", 0.0))
        outputs += len(rows)
        counts = [r.get("generated_tokens") for r in rows]
        tokens = tokens + sum(counts) if tokens is not None and all(c is not None for c in counts) else None
    if tokens:
        return seconds / tokens, "per token"
    return (seconds / outputs if outputs else None), "per output"


def _adapt_seconds(cells: pd.DataFrame) -> float | None:
    values = [s["training"]["adapt_s"] / max(1, int(users)) for s, users in zip(cells["settings"], cells["users"])
              if isinstance(s, dict) and isinstance(s.get("training"), dict) and "adapt_s" in s["training"]]
    return float(np.mean(values)) if values else None


def _relative_cost(store, cells: pd.DataFrame, properties: dict, greedy: tuple[float | None, str]):
    if properties.get("reranks_samples"):
        settings = cells["settings"].iloc[0] or {}
        return float(max(settings.get("ns", [1]))), "N samples"
    cost, basis = _generation_cost(store, cells)
    if cost is None or not greedy[0] or basis != greedy[1]:
        return None, basis
    return cost / greedy[0], basis


def verdict_rows(store: RunStore, frame: pd.DataFrame, analysis: PolicyAnalysis) -> list[VerdictRow]:
    """Deployments of one policy that generate, best ROUGE-1 first, Pareto front marked."""
    frame = frame[frame["policy"] == analysis.policy]
    reference = frame[[bool(p.get("reference_baseline")) for p in frame["properties"]]]
    greedy = _generation_cost(store, reference) if not reference.empty else (None, "per output")
    rows = []
    for method in analysis.methods:
        quality = analysis.cis.get(method.label, {}).get("rouge1")
        if not quality:
            continue
        cells = frame[frame["decoder"] == method.label]
        cost, basis = _relative_cost(store, cells, method.properties, greedy)
        rows.append(VerdictRow(method.label, quality, analysis.cis[method.label].get("policy_accuracy"),
                               _adapt_seconds(cells) if method.properties.get("learns_from_pairs") else None,
                               cost, basis))
    rows.sort(key=lambda r: -r.quality["mean"])
    for row in rows:
        row.pareto = row.relative_cost is not None and not any(
            other.relative_cost is not None and other.relative_cost <= row.relative_cost
            and other.quality["mean"] >= row.quality["mean"]
            and (other.relative_cost < row.relative_cost or other.quality["mean"] > row.quality["mean"])
            for other in rows)
    return rows


def _ci(ci: dict | None) -> str:
    return "-" if not ci else f"{ci['mean']:.2f} [{ci['low']:.2f}, {ci['high']:.2f}]"


def verdict_table(rows: list[VerdictRow]) -> str:
    lines = ["| Rank | Deployment | ROUGE-1 vs the users' text | Policy Acc | Adapt s / new user | "
             "Generation cost ÷ greedy | Pareto |", "|---|---|---|---|---|---|---|"]
    for rank, r in enumerate(rows, 1):
        adapt = "none" if r.adapt_s_per_user is None else f"{r.adapt_s_per_user:.2f}"
        cost = "-" if r.relative_cost is None else f"{r.relative_cost:.1f}× ({r.cost_basis})"
        lines.append(f"| {rank} | {r.label} | {_ci(r.quality)} | {_ci(r.policy_accuracy)} | {adapt} | {cost} | "
                     f"{'★' if r.pareto else ''} |")
    return "\n".join(lines)


def verdict_sentence(rows: list[VerdictRow], analysis: PolicyAnalysis) -> str:
    """What the numbers say, with the cross-fitted interval and its power; 'cannot separate' where it includes 0."""
    top = rows[0]
    cost = f", at {top.relative_cost:.1f}× the counted cost of greedy" if top.relative_cost is not None else ""
    difference = analysis.icl_minus_reward.get("rouge1")
    if not difference or analysis.best_icl is None or analysis.best_reward is None:
        return f"For these users, {top.label} writes closest to their own text (ROUGE-1 {_ci(top.quality)}){cost}."
    icl, reward = winners(difference)
    interval = interval_text(difference, " ROUGE-1")
    power = f". Cross-fitted (winners chosen on one half of the users, measured on the other); {power_text(difference)}"
    low, high = difference["low"], difference["high"]
    if low is not None and low > 0:
        return (f"For these users, {top.label} writes closest to their own text{cost}; the best ICL variant "
                f"({icl}) beats the best reward method ({reward}) by {interval}{power}.")
    if high is not None and high < 0:
        return (f"For these users, {top.label} writes closest to their own text{cost}; the best reward method "
                f"({reward}) beats the best ICL variant ({icl}): ICL − reward = {interval}{power}.")
    return (f"For these users, {top.label} has the highest ROUGE-1{cost}, but the data cannot separate the best "
            f"ICL variant ({icl}) from the best reward method ({reward}): {interval}"
            f"{' includes 0' if low is not None else ''}{power}.")


def verdict_section(store: RunStore, frame: pd.DataFrame, analyses: list[PolicyAnalysis]) -> list[str]:
    parts = []
    for analysis in analyses:
        rows = verdict_rows(store, frame, analysis)
        if len(rows) < 2:
            continue
        parts += ["", f"## Verdict: which deployment to use for these users ({analysis.policy})", "",
                  verdict_table(rows), "", verdict_sentence(rows, analysis), "",
                  "ROUGE-1 and policy accuracy: means over adaptation users with 95% bootstrap CIs. ★: on the "
                  "quality-vs-cost Pareto front (no other deployment is both closer to the users' text and "
                  "cheaper). Best-of-N's cost is its N samples per output."]
    return parts
