"""The report's downstream sections (issue #41, Personalized RewardBench's legs):

- the judge: every deployment's output judged against zero-shot's and against the user's own text by a
  pairwise LLM judge that knows the user (runner/judging.py), with the judge's own failures beside it —
  position bias, unparseable answers — and how often it agrees with ROUGE-1;
- the RL leg: each reward method's policy tuned by GRPO (decoders/rl.py), its quality, its counted RL work
  per new user, and RM accuracy correlated with RL-leg quality across methods.

    persalign report RUN   # present when the run was made with judge.models set / rl.enabled
"""

from __future__ import annotations

import math

from persalign.analysis.study import PolicyAnalysis
from persalign.report.cell_text import SYMBOLS, correlation_cell, with_ci
from persalign.report.study_sections import _table

COLUMNS = (("judge_win_rate", "Judged win % vs zero-shot"), ("judge_user_win_rate", "Judged win % vs user's text"),
           ("judge_rouge_agreement", "Agrees with ROUGE-1 %"), ("judge_position_bias", "Position bias %"),
           ("judge_invalid", "Unparseable %"))


def judge_table(analysis: PolicyAnalysis) -> str | None:
    """Per deployment, each judged metric with its 95 % interval over users (None: nothing was judged)."""
    shown = [(key, title) for key, title in COLUMNS if any(m.user_means.get(key) for m in analysis.methods)]
    if not shown:
        return None
    rows = [[m.label] + [with_ci(analysis.cis.get(m.label, {}).get(key), 1) for key, _ in shown]
            for m in analysis.methods if any(m.user_means.get(key) for key, _ in shown)]
    table = _table(["Deployment"] + [title for _, title in shown], rows)
    if "judge_rouge_agreement" not in dict(shown) and any(m.user_means.get("rouge1") for m in analysis.methods):
        table += ("\n\nAgreement with ROUGE-1: not measurable here — on no pair did the judge prefer one output "
                  "while ROUGE-1 against the user's text also did (every valid answer a tie or position bias).")
    return table


def rl_table(analysis: PolicyAnalysis) -> str | None:
    """Per RL deployment: RM accuracy, ROUGE-1, judged win %, its RL FLOPs per new user; then the correlations."""
    methods = [m for m in analysis.methods if m.properties.get("tunes_policy")]
    if not methods:
        return None
    ci = lambda m, key: with_ci(analysis.cis.get(m.label, {}).get(key))  # noqa: E731
    rows = [[m.label, ci(m, "rm_accuracy"), ci(m, "rouge1"), ci(m, "judge_win_rate"), per_user_rl(m)]
            for m in methods]
    for statistic, symbol in SYMBOLS.items():
        for metric, title in (("rouge1", "ROUGE-1"), ("judge_win_rate", "judged win rate")):
            table = analysis.rl_quality.get(metric) or {}
            if any(v is not None for v in table.values()):
                rows.append([f"{symbol}: RM Acc vs {title} (RL)", correlation_cell(table.get(statistic)), "", "", ""])
    return _table(["Method (RL)", "RM Acc", "ROUGE-1", "Judged win %", "RL TFLOP per new user"], rows)


def per_user_rl(method) -> str:
    flops = [s.get("training", {}).get("adapt_work", {}).get("rl_flops_per_user") for s in method.settings or []]
    flops = [f for f in flops if f is not None]
    return f"{math.fsum(flops) / len(flops) / 1e12:.3g}" if flops else "-"


RL_NOTE = ("GRPO through TRL with a LoRA adapter: one adapter per adaptation user for a personalized reward model "
           "(tuned on that user's support prompts), one for every user for a global one; steps capped as the cells' "
           "settings say. RL TFLOP per new user is counted work (sampling, forward + backward, the RM's reads); a "
           "global RM's one adapter costs no new user anything.")
JUDGE_NOTE = ("Win % counts a tie as half; both orders are asked and a pair whose two answers name the same position "
              "is position bias (a tie); unparseable answers are left out of the win rate and counted apart. The "
              "judge is not the reward model that guided the output, so this win rate is not circular; how far to "
              "trust it at this judge's size is the ROUGE-1 agreement.")


def downstream_sections(analyses: list[PolicyAnalysis]) -> list[str]:
    """The RL leg's and the judge's sections, per policy model, where the run has them."""
    parts = []
    for make, title, note in ((rl_table, "RL leg: the policy tuned with each reward model", RL_NOTE),
                              (judge_table, "Judged by an LLM that knows the user", JUDGE_NOTE)):
        for a in analyses:
            table = make(a)
            parts += ["", f"## {title} ({a.policy})", "", note, "", table] if table else []
    return parts
