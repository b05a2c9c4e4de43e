"""The verdict a practitioner can act on: deployments ranked by how close they write to the users' own text.

For each policy: every deployment with its ROUGE-1 against the users' own
text and its policy accuracy (95% intervals over adaptation users,
analysis/intervals.py), its paired ROUGE-1 difference from greedy (zero-shot)
with the smallest difference these users could detect (80% power), and what it
costs, COUNTED
(persalign/engine/cost.py): generation FLOPs per output ÷ greedy's, and adaptation
FLOPs per new user, with measured seconds beside them. Counted costs are a
property of the method (two deployments writing the same outputs the same way
cost the same, whatever ran first or beside them); seconds are not. The
Pareto front (no other deployment both closer to the users' text and cheaper)
uses the counted cost. The sentence above the table is generated from these
numbers, with the cross-fitted "best ICL − best reward method that steers
(λ > 0)" interval (analysis/paired.py); where it includes 0 it says the data
cannot separate them, and it counts the reward methods that chose λ = 0.

    persalign report runs/demo/demo   # the verdict opens every report with generations
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from persalign.analysis.intervals import PERCENT, difference_bounds, difference_interval, why_none
from persalign.analysis.multiplicity import difference_p_value, holm, leader_versus_runner_up
from persalign.analysis.power import mean_detectable_difference
from persalign.analysis.study import SWITCHED_OFF, PolicyAnalysis
from persalign.report.cell_text import with_ci
from persalign.report.study_sections import interval_text, power_text, winners
from persalign.runner.store import RunStore


@dataclass
class VerdictRow:
    label: str
    quality: dict  # ROUGE-1 metric_ci
    policy_accuracy: dict | None
    adapt: dict | None  # counted adaptation work per new user (+ measured seconds); None: nothing is adapted
    relative_cost: float | None  # counted generation FLOPs per output ÷ greedy's
    seconds_per_output: float | None  # measured generation seconds per output (beside the count, not ranked on)
    versus_greedy: dict | None = None  # paired ROUGE-1 difference from zero-shot with its detectable difference
    pareto: bool = False
    switched_off: bool = False  # ARGS with λ = 0 in every seed: greedy decoding


def _counted_flops(cells: pd.DataFrame) -> float | None:
    """Counted generation FLOPs per output, over a deployment's cells (seeds); None for runs without counts."""
    counted = [w for w in cells.get("counted_work", pd.Series(dtype=object)) if isinstance(w, dict)]
    if not counted or len(counted) != len(cells):
        return None
    return math.fsum(w["flops_per_output"] * w["outputs"] for w in counted) / sum(w["outputs"] for w in counted)


def _seconds_per_output(cells: pd.DataFrame) -> float | None:
    seconds = sum(float((s or {}).get("generation_s", 0.0)) for s in cells["stage_seconds"])
    outputs = int(cells["examples"].sum()) if "examples" in cells else 0
    return seconds / outputs if outputs else None


def _adaptation(cells: pd.DataFrame) -> dict | None:
    """Counted adaptation work per new user and the measured seconds (support features excluded)."""
    logs = [s["training"] for s in cells["settings"] if isinstance(s, dict) and isinstance(s.get("training"), dict)]
    counted = [log["adapt_work"]["flops_per_user"] for log in logs if isinstance(log.get("adapt_work"), dict)]
    seconds = [log["adapt_s"] / max(1, int(users)) for log, users in zip(logs, cells["users"]) if "adapt_s" in log]
    if not counted and not seconds:
        return None
    return {"flops": float(np.mean(counted)) if counted else None,
            "seconds": float(np.mean(seconds)) if seconds else None}


def _versus_greedy(method, reference) -> dict | None:
    """Paired (same users) ROUGE-1 difference from zero-shot: its interval and the detectable difference."""
    if reference is None or method is reference:
        return None
    mine, base = method.user_means.get("rouge1", {}), reference.user_means.get("rouge1", {})
    users = sorted(set(mine) & set(base))
    if len(users) < 2:
        return None
    differences = [mine[u] - base[u] for u in users]
    result = difference_interval(differences, difference_bounds(PERCENT))
    return {**result, "detectable": mean_detectable_difference(result.get("sd", 0.0), len(users)),
            "p": difference_p_value(differences)}


def adjust_for_the_table(rows: list[VerdictRow]) -> int:
    """Holm across the table's Δ intervals (each row's `holm_p`); how many intervals the family holds."""
    tested = [r.versus_greedy for r in rows if r.versus_greedy and not r.switched_off]
    for d, adjusted in zip(tested, holm([d.get("p") for d in tested])):
        d["holm_p"] = adjusted
    return sum(d.get("p") is not None for d in tested)


def verdict_rows(store: RunStore, frame: pd.DataFrame, analysis: PolicyAnalysis) -> list[VerdictRow]:
    """Deployments of one policy that generate, best ROUGE-1 first, Pareto front (counted cost) marked."""
    frame = frame[frame["policy"] == analysis.policy]
    reference = next((m for m in analysis.methods if m.properties.get("reference_baseline")), None)
    greedy = _counted_flops(frame[frame["decoder"] == reference.label]) if reference else None
    rows = []
    for method in analysis.methods:
        quality = analysis.cis.get(method.label, {}).get("rouge1")
        if not quality:
            continue
        cells = frame[frame["decoder"] == method.label]
        flops = _counted_flops(cells)
        rows.append(VerdictRow(method.label, quality, analysis.cis[method.label].get("policy_accuracy"),
                               _adaptation(cells) if method.properties.get("learns_from_pairs") else None,
                               flops / greedy if flops is not None and greedy else None,
                               _seconds_per_output(cells), _versus_greedy(method, reference),
                               switched_off=method.switched_off))
    rows.sort(key=lambda r: -r.quality["mean"])
    adjust_for_the_table(rows)
    for row in rows:
        row.pareto = row.relative_cost is not None and not any(
            other.relative_cost is not None and other.relative_cost <= row.relative_cost
            and other.quality["mean"] >= row.quality["mean"]
            and (other.relative_cost < row.relative_cost or other.quality["mean"] > row.quality["mean"])
            for other in rows)
    return rows


def _versus(d: dict | None, switched_off: bool = False) -> str:
    if switched_off:
        return "= greedy (λ = 0)"
    if not d:
        return "–"
    detectable = f"{d['detectable']:.1f}" if np.isfinite(d["detectable"]) else "-"
    if d.get("low") is None:
        return f"{d['mean']:+.2f} (no interval: {why_none(d)}) ({detectable})"
    holm_p = d.get("holm_p")
    adjusted = "" if holm_p is None else f"; Holm p {holm_p:.3f}" if holm_p >= 0.001 else "; Holm p < 0.001"
    return f"{d['mean']:+.2f} [{d['low']:+.2f}, {d['high']:+.2f}] ({detectable}{adjusted})"


def _adapt(a: dict | None) -> str:
    if a is None:
        return "none"
    counted = "-" if a["flops"] is None else f"{a['flops'] / 1e9:.3g} GFLOP"
    return counted + ("" if a["seconds"] is None else f" ({a['seconds']:.2f} s)")


def verdict_table(rows: list[VerdictRow]) -> str:
    lines = ["| Rank | Deployment | ROUGE-1 vs the users' text | Δ vs greedy [95% CI] (detectable) | Policy Acc | "
             "Adapt / new user: counted (measured) | Generation cost ÷ greedy (counted) | Measured s / output | "
             "Pareto |", "|---|---|---|---|---|---|---|---|---|"]
    for rank, r in enumerate(rows, 1):
        cost = "-" if r.relative_cost is None else f"{r.relative_cost:.2f}×"
        seconds = "-" if r.seconds_per_output is None else f"{r.seconds_per_output:.3f}"
        lines.append(f"| {rank} | {r.label} | {with_ci(r.quality)} | {_versus(r.versus_greedy, r.switched_off)} | "
                     f"{with_ci(r.policy_accuracy)} | {_adapt(r.adapt)} | {cost} | {seconds} | "
                     f"{'★' if r.pareto else ''} |")
    return "\n".join(lines)


def switched_off_text(analysis: PolicyAnalysis) -> str:
    """How many reward methods chose λ = 0 (their deployment is greedy decoding), or ''."""
    off = analysis.switched_off
    if not off:
        return ""
    total = len([m for m in analysis.methods if m.decodes_with_learnt_part])
    names = ", ".join(m.label.removesuffix(SWITCHED_OFF) for m in off)
    return (f" {len(off)} of {total} reward methods ({names}) chose λ = 0: the reward switched off, greedy "
            "decoding.")


def leader_text(rows: list[VerdictRow], analysis: PolicyAnalysis) -> str:
    """'X writes closest to their own text' only where X − the runner-up excludes 0 (paired over users);
    else 'X ties with Y'."""
    top = rows[0]
    if len(rows) < 2:
        return f"{top.label} writes closest to their own text"
    second = rows[1]
    by_label = {m.label: m for m in analysis.methods}
    d = leader_versus_runner_up(by_label[top.label].user_means.get("rouge1", {}),
                                by_label[second.label].user_means.get("rouge1", {}), difference_bounds(PERCENT))
    if d is None or d.get("identical"):
        return f"{top.label} and {second.label} write alike, closest to their own text"
    if d["low"] is None:
        return (f"{top.label} has the highest ROUGE-1 (ahead of {second.label} by {d['mean']:+.2f}; "
                f"no interval: {why_none(d)})")
    interval = f"{d['mean']:+.2f} ROUGE-1 [{d['low']:+.2f}, {d['high']:+.2f}]"
    if d["low"] > 0:
        return f"{top.label} writes closest to their own text (ahead of {second.label} by {interval})"
    return (f"{top.label} ties with {second.label} for closest to their own text "
            f"({top.label} − {second.label}: {interval})")


def verdict_sentence(rows: list[VerdictRow], analysis: PolicyAnalysis) -> str:
    """What the numbers say, with the cross-fitted interval and its power; 'cannot separate' where it includes 0."""
    top = rows[0]
    lead = leader_text(rows, analysis)
    cost = f", at {top.relative_cost:.1f}× the counted cost of greedy" if top.relative_cost is not None else ""
    difference = analysis.icl_minus_reward.get("rouge1")
    off = switched_off_text(analysis)
    if not difference or analysis.best_icl is None or analysis.best_reward is None:
        return f"For these users, {lead} (ROUGE-1 {with_ci(top.quality)}){cost}.{off}"
    icl, reward = winners(difference)
    interval = interval_text(difference, " ROUGE-1")
    power = (". Cross-fitted (winners chosen on one half of the users, measured on the other: the gap between the "
             f"winners a half picks, best − best where they are clear); {power_text(difference)}")
    low, high = difference["low"], difference["high"]
    if low is not None and low > 0:
        return (f"For these users, {lead}{cost}; the best ICL variant "
                f"({icl}) beats the best reward method that steers ({reward}) by {interval}{power}.{off}")
    if high is not None and high < 0:
        return (f"For these users, {lead}{cost}; the best reward method "
                f"that steers ({reward}) beats the best ICL variant ({icl}): ICL − reward = {interval}{power}.{off}")
    return (f"For these users, {top.label} has the highest ROUGE-1{cost}, but the data cannot separate the best "
            f"ICL variant ({icl}) from the best reward method that steers ({reward}): {interval}"
            f"{' includes 0' if low is not None else ''}{power}.{off}")


def verdict_section(store: RunStore, frame: pd.DataFrame, analyses: list[PolicyAnalysis]) -> list[str]:
    parts = []
    for analysis in analyses:
        rows = verdict_rows(store, frame, analysis)
        if len(rows) < 2:
            continue
        tested = sum(r.versus_greedy is not None and r.versus_greedy.get("p") is not None for r in rows)
        parts += ["", f"## Verdict: which deployment to use for these users ({analysis.policy})", "",
                  verdict_sentence(rows, analysis), "", verdict_table(rows), "",
                  "ROUGE-1 and policy accuracy: means over adaptation users with 95% intervals (Hall's "
                  "skewness-corrected t, clipped to the metric's range; none below 8 users). Δ vs greedy: "
                  "the paired ROUGE-1 difference from zero-shot on the same users (the union of Hall's and the t "
                  f"interval), in brackets the smallest difference these users detect with 80% power (α = 0.05) and "
                  f"the p-value Holm-adjusted across the table's {tested} Δ intervals (a Δ whose Holm p < 0.05 is "
                  "non-zero with the whole table counted; the intervals themselves are each 95%). "
                  "Costs are COUNTED work, "
                  "not seconds (persalign/engine/cost.py): generation FLOPs per output (prompt prefill, decode steps, "
                  "ARGS's k candidate tokens per step, Best-of-N's N samples and the RM reading them) ÷ "
                  "zero-shot's; adaptation FLOPs per new user (6 · parameters per trained token, plus the "
                  "support-feature pass). Measured seconds stand beside them (support features computed before "
                  "adaptation is timed) and move with the machine's load. ★: on the Pareto front of ROUGE-1 "
                  "against the counted cost."]
    return parts
