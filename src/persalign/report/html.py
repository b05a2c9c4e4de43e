"""One self-contained HTML report: the Markdown tables plus figures as embedded PNGs.

The Markdown (report/markdown.py) rendered by markdown-it-py; the figures (report/figures.py) placed
after the verdict (its quality-vs-cost figure) and at the end (Figures 1-3).

    persalign report runs/demo/demo --format html
"""

from __future__ import annotations

import html
from pathlib import Path

from persalign.analysis.study import analyse
from persalign.core.files import write_atomic
from persalign.report.figures import (  # noqa: F401  (_label_points: tests use it from here)
    _label_points,
    figure_generation,
    figure_quality_vs_cost,
    figure_rm_vs_policy,
    figure_shots,
)
from persalign.report.markdown import build_report, results_frame
from persalign.runner.store import RunStore


def markdown_to_html(markdown: str) -> str:
    """The report's Markdown as HTML (CommonMark + tables, markdown-it-py; raw HTML in the text is escaped),
    each table in a scrolling frame so a wide one never widens the page."""
    from markdown_it import MarkdownIt

    body = MarkdownIt("commonmark", {"html": False}).enable("table").render(markdown)
    return body.replace("<table>", '<div class="wide"><table>').replace("</table>", "</table></div>")


def build_html_report(run_dir: str | Path) -> Path:
    store = RunStore(run_dir)
    store.check_is_run()
    frame = results_frame(store)
    analyses = analyse(run_dir) if not frame.empty else []
    markdown = build_report(run_dir, analyses)
    figures = [("Figure 1: RM accuracy vs policy accuracy", figure_rm_vs_policy(frame, analyses)),
               ("Figure 2: generation quality per method", figure_generation(frame, analyses)),
               ("Figure 3: ROUGE-1 vs number of demonstrations", figure_shots(frame, analyses))] \
        if not frame.empty else []
    body = markdown_to_html(markdown)
    pareto = figure_quality_vs_cost(store, frame, analyses) if not frame.empty else None
    if pareto:  # right under the verdict it illustrates, before the per-policy tables
        title = "Verdict figure: quality vs cost, Pareto front marked"
        image = f'<h2>{title}</h2>\n<img alt="{title}" src="data:image/png;base64,{pareto}">\n'
        at = body.find("<h2>Policy:")
        body = body[:at] + image + body[at:] if at >= 0 else body + "\n" + image
    images = "".join(f'\n<h2>{html.escape(title)}</h2>\n'
                     f'<img alt="{html.escape(title)}" src="data:image/png;base64,{png}">\n'
                     for title, png in figures if png)
    at = min((i for i in (body.find("<h2>Sample generations"), body.find("<h2>What next")) if i >= 0), default=-1)
    body = body[:at] + images + body[at:] if at >= 0 else body + images  # the page ends with what to do next
    page = ("<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>persalign report</title><style>"
            "body{font-family:sans-serif;max-width:1100px;margin:2em auto}table{border-collapse:collapse}"
            "td,th{border:1px solid #ccc;padding:3px 8px;text-align:right;white-space:nowrap}img{max-width:100%}"
            "td:last-child{white-space:normal;text-align:left}"
            ".wide{overflow-x:auto;margin:0.5em 0}</style></head>"
            f"<body>\n{body}\n</body></html>\n")
    path = Path(run_dir) / "report.html"
    write_atomic(path, page)  # a regular file or a new path only (files.writable_target)
    return path
