"""The report's judge section (issue #41): every deployment's output judged against zero-shot's and against
the user's own text by a pairwise LLM judge that knows the user (runner/judging.py), with the judge's own
failures beside it — position bias, unparseable answers — and how often it agrees with ROUGE-1.

    persalign report RUN   # present when the run was made with judge.models set
"""

from __future__ import annotations

from persalign.analysis.study import PolicyAnalysis
from persalign.report.study_sections import _table, with_ci

COLUMNS = (("judge_win_rate", "Judged win % vs zero-shot"), ("judge_user_win_rate", "Judged win % vs user's text"),
           ("judge_rouge_agreement", "Agrees with ROUGE-1 %"), ("judge_position_bias", "Position bias %"))


def judge_table(analysis: PolicyAnalysis) -> str | None:
    """Per deployment, each judged metric with its 95 % interval over users (None: nothing was judged)."""
    shown = [(key, title) for key, title in COLUMNS if any(m.user_means.get(key) for m in analysis.methods)]
    if not shown:
        return None
    rows = [[m.label] + [with_ci(analysis.cis.get(m.label, {}).get(key), 1) for key, _ in shown]
            for m in analysis.methods if any(m.user_means.get(key) for key, _ in shown)]
    return _table(["Deployment"] + [title for _, title in shown], rows)


def judge_sections(analyses: list[PolicyAnalysis]) -> list[str]:
    parts = []
    for a in analyses:
        table = judge_table(a)
        if table:
            parts += ["", f"## Judged by an LLM that knows the user ({a.policy})", "",
                      "Win % counts a tie as half; both orders are asked and a pair whose two answers name the "
                      "same position is position bias (a tie); unparseable answers are left out (the cells' "
                      "`judge_invalid`). The judge is not the reward model that guided the output, so this win "
                      "rate is not circular; how far to trust it at this judge's size is the ROUGE-1 agreement.",
                      "", table]
    return parts
