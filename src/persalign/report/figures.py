"""The report's figures, from stored results only, each a PNG (base64) for the HTML page.

- Verdict figure: ROUGE-1 against the counted generation cost ÷ greedy, Pareto front joined;
- Figure 1: RM accuracy vs policy accuracy per policy model, with Pearson r, Spearman ρ, Kendall τ;
- Figure 2: ROUGE-1, ROUGE-L and BERTScore-F1 per deployment, ICL variants highlighted;
- Figure 3: ROUGE-1 vs number of ICL demonstrations, random vs RAG.

Every drawn mean carries its 95% interval over users as an error bar (where the procedure gives
one, analysis/intervals.py); point labels are placed so they never overprint each other, a point,
or the frame; legends sit outside the axes.

    persalign report runs/demo/demo --format html
"""

from __future__ import annotations

import base64
import io
import textwrap

import matplotlib

matplotlib.use("Agg")  # headless; set before pyplot is imported
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.ticker import FuncFormatter, LogLocator, MaxNLocator, NullFormatter  # noqa: E402

from persalign.analysis.correlations import correlate_all  # noqa: E402
from persalign.report.verdict import verdict_rows  # noqa: E402

LABEL_OFFSETS = [(5, 3), (5, -10), (-5, 3), (-5, -10), (5, 12), (5, -19), (-5, 12), (-5, -19), (5, 21), (5, -28),
                 (-5, 21), (-5, -28), (5, 30), (5, -37), (-5, 30), (-5, -37)]
PAD = 2.0  # points around an estimated text box: the estimate of its glyphs is not exact
LEGEND_BELOW = {"loc": "upper center", "bbox_to_anchor": (0.5, -0.16), "fontsize": 7, "frameon": False}


def png(fig) -> str:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=110, bbox_inches="tight")
    plt.close(fig)
    return base64.b64encode(buffer.getvalue()).decode("ascii")


def _error(ci: dict | None) -> tuple[float, float]:
    """(below, above) the mean for an error bar; (0, 0) where no interval is printed."""
    if not ci or ci.get("low") is None:
        return 0.0, 0.0
    return ci["mean"] - ci["low"], ci["high"] - ci["mean"]


def _label_points(ax, xs: list[float], ys: list[float], labels: list[str], fontsize: float = 8) -> None:
    """Name each point at the first nearby offset whose text box hits no other label or point and stays
    inside the axes; if none does, the offset that hits the fewest (then one inside the frame).

    Methods with near-equal accuracies are common (the study has three at 72.22%), so plain annotations
    overprint; Best-of-N sits at the right edge, so a label to its right would leave the frame.
    """
    points: dict[tuple, list[str]] = {}  # methods at the same spot share one label, not a pile of them
    for x, y, label in zip(xs, ys, labels):
        points.setdefault((round(x, 2), round(y, 2)), []).append(label)
    xs, ys = [x for x, _ in points], [y for _, y in points]
    labels = [", ".join(names) for names in points.values()]
    ax.autoscale_view()
    ax.figure.canvas.draw()  # the axes' final size, in points
    to_points = 72 / ax.figure.dpi
    frame = [v * to_points for v in ax.get_window_extent().extents]
    anchors = [tuple(p * to_points for p in ax.transData.transform((x, y))) for x, y in zip(xs, ys)]
    marker = 3.5  # half-width of a scatter marker, in points
    taken = [(ax_ - marker, ay - marker, ax_ + marker, ay + marker) for ax_, ay in anchors]

    def hits(box):
        outside = box[0] < frame[0] or box[2] > frame[2] or box[1] < frame[1] or box[3] > frame[3]
        overlaps = sum(not (box[2] <= t[0] or t[2] <= box[0] or box[3] <= t[1] or t[3] <= box[1]) for t in taken)
        return (overlaps, outside)  # overprinting is worse than leaving the frame

    for (ax_, ay), label in sorted(zip(anchors, labels), key=lambda p: (-p[0][1], p[0][0])):
        width, height = 0.6 * fontsize * len(label), fontsize
        candidates = []
        for dx, dy in LABEL_OFFSETS:
            left = ax_ + dx if dx > 0 else ax_ + dx - width
            box = (left - PAD, ay + dy - PAD, left + width + PAD, ay + dy + height + PAD)  # descenders, glyph widths
            if abs(dy) > 10:  # a leader line joins a far label to its point's edge: nothing may sit across it
                edge = ay + (marker if dy > 0 else -marker)
                box = (min(box[0], ax_), min(box[1], edge), max(box[2], ax_), max(box[3], edge))
            candidates.append((hits(box), (dx, dy), box))
            if candidates[-1][0] == (0, False):
                break
        _, (dx, dy), box = min(candidates, key=lambda c: c[0])
        taken.append(box)
        ax.annotate(label, ax.transData.inverted().transform((ax_ / to_points, ay / to_points)),
                    xytext=(dx, dy), textcoords="offset points", fontsize=fontsize, ha="left" if dx > 0 else "right",
                    arrowprops={"arrowstyle": "-", "lw": 0.4, "color": "0.5"} if abs(dy) > 10 else None)


def _cis(analyses: list, policy: str) -> dict:
    return next((a.cis for a in analyses if a.policy == policy), {})


def figure_rm_vs_policy(frame: pd.DataFrame, analyses: list = ()) -> str | None:
    if "rm_accuracy" not in frame or frame["rm_accuracy"].notna().sum() == 0:
        return None
    policies = list(dict.fromkeys(frame["policy"]))
    fig, axes = plt.subplots(1, len(policies), figsize=(5 * len(policies), 4), squeeze=False)
    for ax, policy in zip(axes[0], policies):
        sub = frame[(frame["policy"] == policy) & frame["rm_accuracy"].notna() & frame["policy_accuracy"].notna()]
        means = sub.groupby("decoder")[["rm_accuracy", "policy_accuracy"]].mean()
        cis = _cis(analyses, policy)
        xerr = list(zip(*[_error(cis.get(m, {}).get("rm_accuracy")) for m in means.index])) or None
        yerr = list(zip(*[_error(cis.get(m, {}).get("policy_accuracy")) for m in means.index])) or None
        ax.errorbar(means["rm_accuracy"], means["policy_accuracy"], xerr=xerr, yerr=yerr, fmt="o", ms=4,
                    elinewidth=0.6, ecolor="0.6")
        _label_points(ax, means["rm_accuracy"].tolist(), means["policy_accuracy"].tolist(), list(means.index))
        stats = list(correlate_all(means["rm_accuracy"].values, means["policy_accuracy"].values).values())
        reasons = {s.reason for s in stats}
        summary = f"correlations undefined: {reasons.pop()}" if len(reasons) == 1 and None not in reasons \
            else "\n".join(str(s) for s in stats)
        ax.set_title("\n".join([policy] + textwrap.wrap(summary, 70) if "\n" not in summary else [policy, summary]),
                     fontsize=8)
        ax.set_xlabel("RM accuracy (%)")
        ax.set_ylabel("policy accuracy (%)")
    return png(fig)


def prompting(properties: dict) -> str | None:
    """How a reward-free deployment prompts the policy: the reference (no demos), random or retrieved demos."""
    if properties.get("reference_baseline"):
        return "reference"
    if properties.get("uses_demonstrations"):
        return "retrieved" if properties.get("retrieves_demonstrations") else "random"
    return None


TITLES = {"rouge1": "ROUGE-1", "rougeL": "ROUGE-L", "bertscore_f1": "BERTScore-F1"}
COLOURS = {"random": "tab:orange", "retrieved": "tab:red", "reference": "tab:gray"}


def figure_generation(frame: pd.DataFrame, analyses: list = ()) -> str | None:
    """A dot plot per metric: one row per deployment, one marker per policy model; ICL variants in orange."""
    metrics = [m for m in ("rouge1", "rougeL", "bertscore_f1") if m in frame and frame[m].notna().any()]
    if not metrics:
        return None
    kinds = {row["decoder"]: prompting(row["properties"]) for _, row in frame.iterrows()}
    means = frame.groupby(["decoder", "policy"], sort=False)[metrics].mean().reset_index()
    labels = [label for label in dict.fromkeys(frame.sort_values("decoder_index")["decoder"])
              if means.loc[means["decoder"] == label, metrics].notna().any().any()]
    policies = list(dict.fromkeys(frame["policy"]))
    fig, axes = plt.subplots(1, len(metrics), figsize=(4.5 * len(metrics), 0.35 * len(labels) + 1.5),
                             squeeze=False, sharey=True)
    for ax, metric in zip(axes[0], metrics):
        for p_index, policy in enumerate(policies):
            rows, cis = means[means["policy"] == policy].set_index("decoder"), _cis(analyses, policy)
            for y, label in enumerate(labels):
                if label in rows.index and pd.notna(rows.loc[label, metric]):
                    below, above = _error(cis.get(label, {}).get(metric))
                    ax.errorbar(rows.loc[label, metric], y, xerr=[[below], [above]], fmt="osD^v<>P*X"[p_index % 10],
                                color=COLOURS.get(kinds.get(label), "tab:blue"), ms=5, elinewidth=0.8,
                                label=policy if label == labels[0] else None)
        ax.set_yticks(range(len(labels)), labels, fontsize=8)
        ax.invert_yaxis()
        ax.set_title(TITLES[metric])
        ax.grid(axis="x", alpha=0.3)
    if len(policies) > 1:
        fig.legend(*axes[0][0].get_legend_handles_labels(), title="policy model", **LEGEND_BELOW)
    return png(fig)


def figure_shots(frame: pd.DataFrame, analyses: list = ()) -> str | None:
    """ROUGE-1 against the number of demonstrations, one line per (policy, random | retrieved); whole shots."""
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
        curve = points.groupby("shots").agg(rouge1=("rouge1", "mean"), label=("decoder", "first"))
        cis = _cis(analyses, policy)
        errors = list(zip(*[_error(cis.get(label, {}).get("rouge1")) for label in curve["label"]]))
        ax.errorbar(curve.index, curve["rouge1"], yerr=errors or None, fmt="-o", capsize=2, ms=4,
                    label=f"{'RAG' if kind == 'retrieved' else 'random'} | {policy}")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # demonstrations come whole
    ax.set_xlabel("demonstrations")
    ax.set_ylabel("ROUGE-1")
    ax.legend(**LEGEND_BELOW)
    return png(fig)


def figure_quality_vs_cost(store, frame: pd.DataFrame, analyses: list) -> str | None:
    """The verdict's figure: ROUGE-1 against the counted generation cost ÷ greedy, Pareto front joined, per policy."""
    panels = [(a.policy, [r for r in verdict_rows(store, frame, a) if r.relative_cost is not None]) for a in analyses]
    panels = [(policy, rows) for policy, rows in panels if len(rows) >= 2]
    if not panels:
        return None
    fig, axes = plt.subplots(1, len(panels), figsize=(6 * len(panels), 4.8), squeeze=False)
    for ax, (policy, rows) in zip(axes[0], panels):
        costs, quality = [r.relative_cost for r in rows], [r.quality["mean"] for r in rows]
        errors = list(zip(*[_error(r.quality) for r in rows]))
        ax.errorbar(costs, quality, yerr=errors, fmt="none", ecolor="0.7", elinewidth=0.8, zorder=2)
        ax.scatter(costs, quality, color=["tab:red" if r.pareto else "tab:gray" for r in rows], zorder=3)
        front = sorted((r.relative_cost, r.quality["mean"]) for r in rows if r.pareto)
        ax.step([c for c, _ in front], [q for _, q in front], where="post", color="tab:red", label="Pareto front")
        ax.set_xscale("log")
        ax.margins(x=0.15, y=0.12)  # room for the labels of the cheapest and the costliest
        ax.xaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
        ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: f"{x:g}×"))
        ax.xaxis.set_minor_formatter(NullFormatter())  # not "2×10⁰, 3×10⁰"
        _label_points(ax, costs, quality, [r.label for r in rows])
        ax.set_xlabel("counted generation cost ÷ greedy (FLOPs per output, log scale)")
        ax.set_ylabel("ROUGE-1 vs the users' own text")
        ax.set_title(policy, fontsize=9)
        ax.legend(**LEGEND_BELOW)
    return png(fig)
