"""The study sections of a report: Tables 2, 4, 5, 6, Finding 3 and findings sentences.

Every number comes from `analysis.study.analyse(run_dir)` (stored rows only);
every sentence in "Findings" is generated from those numbers, with its CI.
Bracketed ranges are 95% intervals whose procedures are checked by simulation
(analysis/intervals.py, analysis/paired.py); where no procedure reaches its
stated coverage (too few users or methods) no interval is printed and the
cell says why.

    persalign report runs/study_news          # includes these sections
"""

from __future__ import annotations


import numpy as np

from persalign.analysis.study import GENERATION_METRICS, PolicyAnalysis
from persalign.report.cell_text import SYMBOLS, correlation_cell, curve_cell, true_means_text, with_ci

def _table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in rows])


def _reward_labels(analyses: list[PolicyAnalysis]) -> list[str]:
    return list(dict.fromkeys(m.label for a in analyses for m in a.methods if m.decodes_with_learnt_part))


def table2(analyses: list[PolicyAnalysis]) -> str:
    """RM accuracy and policy accuracy per policy model, with the correlations as bottom rows."""
    header = ["Method", "RM Acc"] + [f"Policy Acc ({a.policy})" for a in analyses]
    rows = []
    for label in _reward_labels(analyses):
        rm = next((a.cis.get(label, {}).get("rm_accuracy") for a in analyses
                   if a.cis.get(label, {}).get("rm_accuracy")), None)
        rows.append([label, with_ci(rm)] + [with_ci(a.cis.get(label, {}).get("policy_accuracy")) for a in analyses])
    for statistic, symbol in SYMBOLS.items():
        rows.append([symbol, "-"] + [correlation_cell(a.rm_vs_policy.get(statistic)) for a in analyses])
    return _table(header, rows)


def table4(analysis: PolicyAnalysis) -> str:
    """Ranking accuracy of RMs and adapted policies (ICL: policy accuracy only).

    Methods are rows, not the paper's columns: a study has 20 and more, which no page is wide enough for.
    """
    methods = [m for m in analysis.methods if m.decodes_with_learnt_part or m.uses_demonstrations]
    rows = [[m.label] + [with_ci(analysis.cis.get(m.label, {}).get(metric)) for metric in ("rm_accuracy",
                                                                                           "policy_accuracy")]
            for m in methods]
    return _table(["Method", "RM Acc", "Policy Acc"], rows)


def table5(analyses: list[PolicyAnalysis]) -> str:
    """The RM's own win rate over zero-shot beside the ground-truth gain (the reward-hacking check)."""
    header = ["Method"]
    for a in analyses:
        header += [f"Win rate ({a.policy})", "ROUGE-1 gain over zero-shot", "ROUGE-1 beats zero-shot (%)"]
    rows = []
    for label in _reward_labels(analyses):
        row = [label]
        for a in analyses:
            cis = a.cis.get(label, {})
            row += [with_ci(cis.get("win_rate"), 1), with_ci(cis.get("rouge1_gain")),
                    with_ci(cis.get("true_win_rate"), 1)]
        rows.append(row)
    for statistic, symbol in SYMBOLS.items():
        row = [f"{symbol} (win rate, gain)"]
        for a in analyses:
            row += [correlation_cell(a.win_vs_gain.get(statistic)), "", ""]
        rows.append(row)
    return _table(header, rows)


def table6(analyses: list[PolicyAnalysis]) -> str:
    """Correlation of each standard metric with ROUGE-1 across methods, per policy model."""
    header = ["Policy", "Statistic", "RM Acc", "Policy Acc", "Win Rate"]
    rows = []
    for a in analyses:
        for statistic, symbol in SYMBOLS.items():
            rows.append([a.policy, f"{symbol} with ROUGE-1"] +
                        [correlation_cell(a.vs_rouge[x].get(statistic)) for x in ("rm_accuracy", "policy_accuracy",
                                                                                    "win_rate")])
    return _table(header, rows)


def winners(diff: dict) -> tuple[str, str]:
    """The cross-fitted winners (ICL, reward method): the most often chosen, with the share of half-splits
    that chose each where it is not all of them."""
    shares: list[dict] = [{}, {}]
    for icl, reward, share in diff["chosen"]:
        for side, label in zip(shares, (icl, reward)):
            side[label] = side.get(label, 0.0) + share
    return _most_chosen(shares[0]), _most_chosen(shares[1])


def _most_chosen(shares: dict[str, float]) -> str:
    best = max(shares, key=shares.get)
    return best if shares[best] > 0.999 else f"{best}, chosen in {100 * shares[best]:.0f}% of half-splits"


def interval_text(diff: dict, unit: str = "") -> str:
    if diff.get("low") is None:
        return f"{diff['mean']:+.2f}{unit} [no interval: {diff.get('reason') or 'undefined'}]"
    return f"{diff['mean']:+.2f}{unit} [{diff['low']:+.2f}, {diff['high']:+.2f}]"


def power_text(diff: dict, title: str = "ROUGE-1") -> str:
    """The smallest difference these users detect (80 % power) and the users a `gap`-point gap needs."""
    if not np.isfinite(diff.get("detectable", float("nan"))):
        return (f"with {diff['users']} users no detectable difference can be stated "
                f"({diff.get('reason') or 'no spread'})")
    needed = diff.get("users_needed")
    need = (f"a {diff['gap']:g}-point gap needs ≈ {needed} users" if needed else
            f"no number of users detects a {diff['gap']:g}-point gap at this spread")
    if diff["detectable"] >= 100:  # every metric here is on a 0-100 scale
        return (f"these {diff['users']} users cannot detect any {title} difference with 80% power (α = 0.05): it "
                f"would take a true difference of {diff['detectable']:.0f} points; {need}")
    return (f"these {diff['users']} users detect a true difference of {diff['detectable']:.1f} {title} points "
            f"with 80% power (α = 0.05); {need}")


def finding3(analysis: PolicyAnalysis) -> str:
    if not (analysis.best_icl and analysis.best_reward):
        return "Finding 3 needs at least one ICL variant and one reward method with generation metrics."
    header = ["Metric", f"{analysis.best_icl.label}", f"{analysis.best_reward.label}",
              "Difference, cross-fitted [95% CI]", "Detectable at 80% power", "Users for a 3-point gap"]
    rows = []
    for metric, title in GENERATION_METRICS:
        diff = analysis.icl_minus_reward.get(metric)
        if diff is None:
            continue
        detectable = f"{diff['detectable']:.2f}" if np.isfinite(diff["detectable"]) else "-"
        rows.append([title, f"{analysis.best_icl.mean(metric):.2f}", f"{analysis.best_reward.mean(metric):.2f}",
                     interval_text(diff), detectable, str(diff["users_needed"] or "-")])
    diff = next(d for d in analysis.icl_minus_reward.values() if d)
    icl, reward = winners(diff)
    return _table(header, rows) + (
        f"\n\nThe two columns of means are over all users. The difference is {diff['selection']} "
        f"(winners: {icl}; {reward}), so no user's difference is measured with winners chosen on that user; "
        "choosing and measuring on the same users gives too many intervals that exclude 0. Reward methods that "
        "chose λ = 0 are greedy decoding and are not candidates. "
        "Detectable: the smallest true difference this interval finds with 80% power (α = 0.05).")


def _interval_words(low, high) -> str:
    if low is None:
        return "its interval is undefined"
    if low > 0:
        return "the whole interval is above 0"
    if high < 0:
        return "the whole interval is below 0"
    return "the interval includes 0"


def true_means_words(true: dict | None) -> str:
    """Finding 1's reading once each method's noise is counted: related, unrelated, or too noisy to tell."""
    if not true or true["low"] is None:
        return true_means_text(true)
    if true["low"] > 0:
        verdict = "related: the whole interval is above 0"
    elif true["high"] < 0:
        verdict = "inversely related: the whole interval is below 0"
    elif true["high"] - true["low"] > 1:
        verdict = "too noisy to tell related from unrelated: the interval is wider than 1"
    else:
        verdict = "no relation shown: the interval includes 0"
    return f"{true_means_text(true)}, {verdict}"


def findings(analyses: list[PolicyAnalysis]) -> list[str]:
    """Sentences generated from the numbers (never hand-written)."""
    out = []
    for a in analyses:
        kendall = a.rm_vs_policy.get("kendall")
        if kendall and kendall["point"].value is not None:
            interval = (f" [{kendall['low']:+.2f}, {kendall['high']:+.2f}]; "
                        f"{_interval_words(kendall['low'], kendall['high'])}" if kendall["low"] is not None
                        else f" (no interval: {kendall['reason']})")
            out.append(f"{a.policy}: RM accuracy vs policy accuracy across {kendall['point'].n} reward methods, "
                       f"Kendall τ = {kendall['point'].value:+.2f}{interval} (observed means); "
                       f"{true_means_words(kendall.get('true'))}.")
        elif kendall:
            out.append(f"{a.policy}: RM vs policy accuracy correlation undefined ({kendall['point'].reason}).")
        if a.best_icl and a.best_reward:
            for metric, title in GENERATION_METRICS:
                diff = a.icl_minus_reward.get(metric)
                if diff:
                    icl, reward = winners(diff)
                    out.append(f"{a.policy}: best ICL variant ({icl}) − best reward method ({reward}), {title}, "
                               "cross-fitted (the gap between the winners a half of the users picks): "
                               f"{interval_text(diff)}; {_interval_words(diff['low'], diff['high'])}; "
                               f"{power_text(diff, title)}.")
        wins = [(m.label, m.mean("win_rate"), m.mean("rouge1_gain")) for m in a.methods  # λ = 0 writes greedy's text
                if m.decodes_with_learnt_part and m.user_means.get("win_rate") and not m.switched_off]
        if wins:
            label, win, gain = max(wins, key=lambda w: w[1])
            out.append(f"{a.policy}: the highest own-RM win rate over zero-shot is {label}'s {win:.1f}%, "
                       f"while its ROUGE-1 gain over zero-shot is {gain:+.2f} points.")
    return out


def best_of_n_table(analysis: PolicyAnalysis, curves: dict[str, dict]) -> str:
    """Quality vs N per method (from the cells' stored curves) and RM accuracy vs Best-of-N quality: by ROUGE-1
    against the user's text, by the judge, and by the RM's own score (circular: it chose the samples)."""
    methods = [m for m in analysis.methods if m.reranks_samples]
    ns = sorted({int(n) for label in curves for c in curves[label].values() for n in c})
    shown = [(name, title) for name, title in (("rouge1", "ROUGE-1"), ("judge_win_rate", "Judged win %"),
                                               ("rm_score", "RM score"))
             if any(curves.get(m.label, {}).get(name) for m in methods)]
    header = ["Method", "RM Acc"] + [f"{title} @N={n}" for _, title in shown for n in ns]
    rows = []
    for m in methods:
        curve = curves.get(m.label, {})
        rows.append([m.label, with_ci(analysis.cis.get(m.label, {}).get("rm_accuracy"))]
                    + [curve_cell(curve, name, n) for name, _ in shown for n in ns])
    # every method's N = 1 output is the same shared sample: the gain is ROUGE-1 @N_max less one constant per
    # user, the same statistic as ROUGE-1 @N_max; one row says both
    same = same_correlations(analysis.bon_quality, analysis.bon_gain)
    correlations = (("RM Acc vs ROUGE-1 @N_max" + (" (= vs the gain from N = 1: the N = 1 sample is shared)"
                                                   if same else ""), analysis.bon_quality),
                    ("RM Acc vs ROUGE-1 gain (N_max vs 1)", {} if same else analysis.bon_gain),
                    ("RM Acc vs judged win rate @N_max", analysis.bon_judged),
                    ("RM Acc vs its own RM score @N_max (circular)", analysis.bon_rm_score))
    for statistic, symbol in SYMBOLS.items():
        for title, table in correlations:
            if table and any(v is not None for v in table.values()):
                rows.append([f"{symbol}: {title}", correlation_cell(table.get(statistic))]
                            + [""] * (len(shown) * len(ns)))
    return _table(header, rows)


def same_correlations(first: dict, second: dict) -> bool:
    """Two correlation tables with the same value for every statistic (one would repeat the other)."""
    values = lambda table: [None if not table.get(s) else table[s]["point"].value for s in SYMBOLS]  # noqa: E731
    return bool(first) and bool(second) and all(
        a is not None and b is not None and abs(a - b) < 1e-12 for a, b in zip(values(first), values(second)))


def study_sections(analyses: list[PolicyAnalysis], curves: dict[str, dict[str, dict]] | None = None) -> list[str]:
    parts = []
    for a in analyses:
        if any(m.reranks_samples for m in a.methods):
            parts += ["", f"## Best-of-N: quality vs N and RM accuracy vs Best-of-N quality ({a.policy})", "",
                      "Curves are means over users (over seeds); without user references only the RM-score "
                      "curve exists. The same N_max samples serve every method (nested N).", "",
                      best_of_n_table(a, (curves or {}).get(a.policy, {}))]
    if not any(m.decodes_with_learnt_part for a in analyses for m in a.methods):
        return parts
    parts += ["", "## Table 2: RM accuracy vs policy accuracy (95% CI over users; correlations across methods)", "",
             table2(analyses)]
    for a in analyses:
        parts += ["", f"## Table 4: ranking accuracy of RMs and adapted policies ({a.policy})", "", table4(a)]
    parts += ["", "## Table 5: own-RM win rate over zero-shot vs the ground-truth gain", "", table5(analyses),
              "", "## Table 6: standard metrics vs ROUGE-1 across methods", "", table6(analyses)]
    for a in analyses:
        parts += ["", f"## Finding 3: best ICL variant vs best reward method ({a.policy})", "", finding3(a)]
    sentences = findings(analyses)
    if sentences:
        parts += ["", "## Findings (generated from the numbers above)", ""] + [f"- {s}" for s in sentences]
    return parts
