"""What `persalign run` and `study` print when they end: one compact table and where everything is.

The full tables live in report.md / report.html; a terminal gets deployments × headline
metrics (means over adaptation users, from results.json), the verdict sentence, and the
paths of report.md, report.html and results.json.

    persalign run demo --quiet
"""

from __future__ import annotations

import json
from pathlib import Path

from persalign.analysis.intervals import MIN_USERS

HEADLINE = (("rouge1", "ROUGE-1"), ("policy_accuracy", "Policy Acc"), ("rm_accuracy", "RM Acc"),
            ("win_rate", "Win Rate"))


def _cell(metric: dict | None) -> str:
    if not metric or metric.get("mean") is None:
        return "-"
    if metric.get("low") is None:
        return f"{metric['mean']:.1f}"
    return f"{metric['mean']:.1f} [{metric['low']:.1f}, {metric['high']:.1f}]"


def headline_table(deployments: list[dict]) -> list[str]:
    """Fixed-width rows: a deployment per line, best ROUGE-1 first, per policy model."""
    columns = [(key, title) for key, title in HEADLINE if any(key in d["metrics"] for d in deployments)]
    lines = []
    for policy in dict.fromkeys(d["policy"] for d in deployments):
        rows = sorted((d for d in deployments if d["policy"] == policy),
                      key=lambda d: -(d["metrics"].get("rouge1", {}).get("mean") or -1e9))
        table = [["Deployment", *(title for _, title in columns)]]
        table += [[d["deployment"], *(_cell(d["metrics"].get(key)) for key, _ in columns)] for d in rows]
        widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
        shown = any(m.get("low") is not None for d in rows for m in d["metrics"].values())
        users = max((m.get("users", 0) for d in rows for m in d["metrics"].values()), default=0)
        how = "95% intervals" if shown else f"no intervals: {users} users, {MIN_USERS} needed"
        lines += ["", f"{policy}  (means over adaptation users ×100, {how})"]
        lines += ["  ".join(text.ljust(width) for text, width in zip(row, widths)).rstrip() for row in table]
    return lines


def closing_summary(run_dir: str | Path, written: bool = False) -> str:
    """Write report.md, report.html and results.json from the stored cells (unless `written` already, as
    `study` does); return what the terminal shows."""
    from persalign.report.html import build_html_report

    run_dir = Path(run_dir)
    html_path = run_dir / "report.html" if written else build_html_report(run_dir)
    results = json.loads((run_dir / "results.json").read_text())
    verdicts = [line for line in (run_dir / "report.md").read_text().splitlines()
                if line.startswith("For these users")]
    lines = [f"== {run_dir.name}"] + headline_table(results["deployments"]) + [""] + verdicts
    damaged, absent = results.get("damaged_cells") or [], results.get("absent_cells") or []
    if damaged or absent:
        lines += ["", f"Warning: a partial run: {len(absent)} planned cells absent ({len(damaged)} of them damaged) "
                      "are in no table (report.md lists them); re-run the same command to complete it."]
    return "\n".join(lines + ["", f"report:  {run_dir / 'report.md'}", f"figures: {html_path}",
                              f"results: {run_dir / 'results.json'} (persalign export {run_dir} --format csv)"])
