"""One self-contained HTML report: the Markdown tables plus figures as embedded PNGs.

Figures, built only from stored metrics:
- Figure 1: RM accuracy vs policy accuracy per policy model, with Pearson r,
  Spearman ρ and Kendall τ across methods (or why they are undefined);
- Figure 2: ROUGE-1, ROUGE-L and BERTScore-F1 per method, ICL variants highlighted;
- Figure 3: ROUGE-1 vs number of ICL demonstrations, random vs RAG.

    persalign report runs/demo/demo --format html
"""

from __future__ import annotations

import base64
import html
import io
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # headless; set before pyplot is imported
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

from persalign.analysis.correlations import correlate_all  # noqa: E402
from persalign.analysis.study import analyse  # noqa: E402
from persalign.report.markdown import build_report, results_frame  # noqa: E402
from persalign.report.verdict import verdict_rows  # noqa: E402
from persalign.runner.store import RunStore  # noqa: E402


def _png(fig) -> str:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=110, bbox_inches="tight")
    plt.close(fig)
    return base64.b64encode(buffer.getvalue()).decode("ascii")


LABEL_OFFSETS = [(5, 3), (5, -10), (-5, 3), (-5, -10), (5, 12), (5, -19), (-5, 12), (-5, -19), (5, 21), (5, -28)]


def _label_points(ax, xs: list[float], ys: list[float], labels: list[str], fontsize: float = 8) -> None:
    """Name each point at the first nearby offset whose text box hits no other label or point.

    Methods with near-equal accuracies are common (the study has three at 72.22%),
    so plain annotations overprint; this greedy search keeps every name legible.
    """
    ax.autoscale_view()
    to_points = 72 / ax.figure.dpi
    anchors = [tuple(p * to_points for p in ax.transData.transform((x, y))) for x, y in zip(xs, ys)]
    marker = 3.5  # half-width of a scatter marker, in points
    taken = [(ax_ - marker, ay - marker, ax_ + marker, ay + marker) for ax_, ay in anchors]

    def clear(box):
        return all(box[2] <= t[0] or t[2] <= box[0] or box[3] <= t[1] or t[3] <= box[1] for t in taken)

    for (ax_, ay), label in sorted(zip(anchors, labels), key=lambda p: (-p[0][1], p[0][0])):
        width, height = 0.6 * fontsize * len(label), fontsize
        for dx, dy in LABEL_OFFSETS:  # first clear offset; if none is clear, the last (farthest) one
            left = ax_ + dx if dx > 0 else ax_ + dx - width
            box = (left, ay + dy, left + width, ay + dy + height)
            if clear(box):
                break
        taken.append(box)
        far = abs(dy) > 10
        ax.annotate(label, ax.transData.inverted().transform((ax_ / to_points, ay / to_points)),
                    xytext=(dx, dy), textcoords="offset points", fontsize=fontsize,
                    ha="left" if dx > 0 else "right",
                    arrowprops={"arrowstyle": "-", "lw": 0.4, "color": "0.5"} if far else None)


def figure_rm_vs_policy(frame: pd.DataFrame) -> str | None:
    if "rm_accuracy" not in frame or frame["rm_accuracy"].notna().sum() == 0:
        return None
    policies = list(dict.fromkeys(frame["policy"]))
    fig, axes = plt.subplots(1, len(policies), figsize=(5 * len(policies), 4), squeeze=False)
    for ax, policy in zip(axes[0], policies):
        sub = frame[(frame["policy"] == policy) & frame["rm_accuracy"].notna() & frame["policy_accuracy"].notna()]
        means = sub.groupby("decoder")[["rm_accuracy", "policy_accuracy"]].mean()
        ax.scatter(means["rm_accuracy"], means["policy_accuracy"])
        _label_points(ax, means["rm_accuracy"].tolist(), means["policy_accuracy"].tolist(), list(means.index))
        stats = list(correlate_all(means["rm_accuracy"].values, means["policy_accuracy"].values).values())
        reasons = {s.reason for s in stats}
        if len(reasons) == 1 and None not in reasons:
            summary = f"correlations undefined: {reasons.pop()}"
        else:
            summary = "\n".join(str(s) for s in stats)
        ax.set_title(f"{policy}\n{summary}", fontsize=8)
        ax.set_xlabel("RM accuracy (%)")
        ax.set_ylabel("policy accuracy (%)")
    return _png(fig)


def figure_generation(frame: pd.DataFrame) -> str | None:
    """A dot plot per metric: one row per method, one marker per policy model; ICL variants in orange."""
    metrics = [m for m in ("rouge1", "rougeL", "bertscore_f1") if m in frame and frame[m].notna().any()]
    if not metrics:
        return None
    kinds = {row["decoder"]: prompting(row["properties"]) for _, row in frame.iterrows()}
    means = frame.groupby(["decoder", "policy"], sort=False)[metrics].mean().reset_index()
    labels = [label for label in dict.fromkeys(frame.sort_values("decoder_index")["decoder"])
              if means.loc[means["decoder"] == label, metrics].notna().any().any()]
    policies = list(dict.fromkeys(frame["policy"]))
    markers = "osD^v<>P*X"
    colours = {"random": "tab:orange", "retrieved": "tab:red", "reference": "tab:gray"}
    fig, axes = plt.subplots(1, len(metrics), figsize=(4.5 * len(metrics), 0.35 * len(labels) + 1.5),
                             squeeze=False, sharey=True)
    for ax, metric in zip(axes[0], metrics):
        for p_index, policy in enumerate(policies):
            rows = means[means["policy"] == policy].set_index("decoder")
            for y, label in enumerate(labels):
                if label in rows.index and pd.notna(rows.loc[label, metric]):
                    ax.scatter(rows.loc[label, metric], y, marker=markers[p_index % len(markers)],
                               color=colours.get(kinds.get(label), "tab:blue"),
                               label=policy if y == 0 or label == labels[0] else None)
        ax.set_yticks(range(len(labels)), labels, fontsize=8)
        ax.invert_yaxis()
        ax.set_title(metric)
        ax.grid(axis="x", alpha=0.3)
    if len(policies) > 1:
        axes[0][-1].legend(fontsize=7, loc="best", title="policy model")
    return _png(fig)


def prompting(properties: dict) -> str | None:
    """How a reward-free deployment prompts the policy: the reference (no demos), random or retrieved demos."""
    if properties.get("reference_baseline"):
        return "reference"
    if properties.get("uses_demonstrations"):
        return "retrieved" if properties.get("retrieves_demonstrations") else "random"
    return None


def figure_shots(frame: pd.DataFrame) -> str | None:
    if "rouge1" not in frame:
        return None
    shots = frame.assign(shots=[s.get("shots", 0) for s in frame["settings"]],
                         kind=[prompting(p) for p in frame["properties"]])
    shots = shots[shots["kind"].notna()]
    if shots["shots"].nunique() < 2:
        return None
    fig, ax = plt.subplots(figsize=(5, 4))
    for (policy, kind), rows in shots.groupby(["policy", "kind"]):
        if kind == "reference":
            continue
        points = pd.concat([rows, shots[(shots["policy"] == policy) & (shots["kind"] == "reference")]])
        curve = points.groupby("shots")["rouge1"].mean()
        ax.plot(curve.index, curve.values, "-o", label=f"{'RAG' if kind == 'retrieved' else 'random'} | {policy}")
    ax.set_xlabel("demonstrations")
    ax.set_ylabel("ROUGE-1")
    ax.legend(fontsize=7)
    return _png(fig)


def figure_quality_vs_cost(store: RunStore, frame: pd.DataFrame, analyses: list) -> str | None:
    """The verdict's figure: ROUGE-1 against the counted generation cost ÷ greedy, Pareto front joined, per policy."""
    panels = [(a.policy, [r for r in verdict_rows(store, frame, a) if r.relative_cost is not None]) for a in analyses]
    panels = [(policy, rows) for policy, rows in panels if len(rows) >= 2]
    if not panels:
        return None
    fig, axes = plt.subplots(1, len(panels), figsize=(5.5 * len(panels), 4.5), squeeze=False)
    for ax, (policy, rows) in zip(axes[0], panels):
        costs, quality = [r.relative_cost for r in rows], [r.quality["mean"] for r in rows]
        ax.scatter(costs, quality, color=["tab:red" if r.pareto else "tab:gray" for r in rows], zorder=3)
        front = sorted((r.relative_cost, r.quality["mean"]) for r in rows if r.pareto)
        ax.step([c for c, _ in front], [q for _, q in front], where="post", color="tab:red", label="Pareto front")
        ax.set_xscale("log")
        _label_points(ax, costs, quality, [r.label for r in rows])
        ax.set_xlabel("counted generation cost ÷ greedy (FLOPs per output, log scale)")
        ax.set_ylabel("ROUGE-1 vs the users' own text")
        ax.set_title(policy, fontsize=9)
        ax.legend(fontsize=7, loc="upper left")  # the costliest (Best-of-N) sit bottom right
    return _png(fig)


def markdown_tables_to_html(markdown: str) -> str:
    out, table = [], []
    for line in markdown.splitlines() + [""]:
        if line.startswith("|"):
            if not set(line) <= set("|-: "):
                table.append([html.escape(c.strip()) for c in line.strip("|").split("|")])
            continue
        if table:
            head, *body = table
            out.append('<div class="wide"><table><tr>' + "".join(f"<th>{c}</th>" for c in head) + "</tr>"
                       + "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in body)
                       + "</table></div>")
            table = []
        if line.startswith("#"):
            level = len(line) - len(line.lstrip("#"))
            out.append(f"<h{level}>{html.escape(line.lstrip('# '))}</h{level}>")
        elif line.strip():
            out.append(f"<p>{html.escape(line)}</p>")
    return "\n".join(out)


def build_html_report(run_dir: str | Path) -> Path:
    store = RunStore(run_dir)
    store.check_is_run()
    frame = results_frame(store)
    analyses = analyse(run_dir) if not frame.empty else []
    markdown = build_report(run_dir, analyses)
    figures = [("Figure 1: RM accuracy vs policy accuracy", figure_rm_vs_policy(frame)),
               ("Figure 2: generation quality per method", figure_generation(frame)),
               ("Figure 3: ROUGE-1 vs number of demonstrations", figure_shots(frame))] if not frame.empty else []
    body = markdown_tables_to_html(markdown)
    pareto = figure_quality_vs_cost(store, frame, analyses) if not frame.empty else None
    if pareto:  # right under the verdict it illustrates, before the per-policy tables
        title = "Verdict figure: quality vs cost, Pareto front marked"
        image = f'<h2>{title}</h2>\n<img alt="{title}" src="data:image/png;base64,{pareto}">\n'
        at = body.find("<h2>Policy:")
        body = body[:at] + image + body[at:] if at >= 0 else body + "\n" + image
    for title, png in figures:
        if png:
            body += f'\n<h2>{html.escape(title)}</h2>\n<img alt="{html.escape(title)}" src="data:image/png;base64,{png}">'
    page = ("<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>persalign report</title><style>"
            "body{font-family:sans-serif;max-width:1100px;margin:2em auto}table{border-collapse:collapse}"
            "td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}img{max-width:100%}"
            ".wide{overflow-x:auto;margin:0.5em 0}</style></head>"
            f"<body>\n{body}\n</body></html>\n")
    path = Path(run_dir) / "report.html"
    path.write_text(page, encoding="utf-8")
    return path
