"""Issue #43 (3): the report reads top-down — verdict sentence first, Markdown rendered by a library,
no "± 0.00" for one seed, sample generations, a closing "what next", figures whose drawn text never
overprints and whose means carry error bars."""

import itertools
import re
import subprocess

import pytest

from persalign.report import figures
from persalign.report.html import build_html_report
from persalign.runner.store import Cell
from tests.stored_runs import run_of

USERS = [f"u{i}" for i in range(1, 11)]
# the demo's shape: label, deployment, ROUGE-1 level, counted GFLOPs per output (greedy = 4), shots
DEMO_LIKE = [("Zero-Shot", "zero_shot", 20.0, 4, 0), ("ICL (4-shot)", "icl", 44.0, 12, 4),
             ("ICL-RAG (4-shot)", "icl_rag", 45.0, 12.4, 4), ("ICL (2-shot)", "icl", 40.0, 8, 2),
             ("Global RM", "args", 21.0, 10, None), ("PAL", "args", 20.5, 10.2, None), ("LoRe", "args", 22.0, 9.8, None),
             ("Global RM (Best-of-N)", "best_of_n", 23.0, 64, None), ("PAL (Best-of-N)", "best_of_n", 22.5, 66, None)]


def _cell(store, index, label, name, level, gflops, shots):
    rows = [{"id": f"{u}-{k}", "user": u, "batch": 0, "prompt": f"Article {k} by {u} | with a pipe",
             "reference": f"The {u} headline {k}", "generation": f"{label} writes {k}", "generated_tokens": 4,
             "rouge1": level + i + 3 * k, "policy_correct": float((i + k) % 3 > 0), "s_chosen": 1.0, "s_rejected": 0.0}
            for i, u in enumerate(USERS) for k in range(2)]
    if name in ("args", "best_of_n"):
        rows = [{**r, "rm_correct": float((i + index) % 4 > 0), "win": 1.0} for i, r in enumerate(rows)]
    store.append(Cell("pol", label, 0), "rows.jsonl", rows)
    properties = {"uses_demonstrations": name.startswith("icl"), "retrieves_demonstrations": name == "icl_rag",
                  "reference_baseline": name == "zero_shot", "learns_from_pairs": name in ("args", "best_of_n"),
                  "reranks_samples": name == "best_of_n"}
    mean = lambda column: 100 * sum(r.get(column, 0) for r in rows) / len(rows)  # noqa: E731
    store.write_metrics(Cell("pol", label, 0), {
        "policy": "pol", "decoder": label, "decoder_name": name, "decoder_index": index, "seed": 0,
        "seed_dependent": name != "zero_shot", "deployment": {"name": name, **properties}, "examples": len(rows),
        "users": len(USERS), "policy_ties": 0.0, "rouge1": sum(r["rouge1"] for r in rows) / len(rows),
        "policy_accuracy": mean("policy_correct"), **({"rm_accuracy": mean("rm_correct"), "win_rate": 100.0}
                                                      if "rm_correct" in rows[0] else {}),
        "stage_seconds": {"generation_s": 1.0}, "counted_work": {"flops_per_output": 1e9 * gflops, "outputs": len(rows)},
        "settings": {"decoder_name": name, "shots": shots, **({"lambda": 0.3} if name == "args" else {})}})


@pytest.fixture
def demo_like(tmp_path):
    return run_of(tmp_path / "run", DEMO_LIKE, _cell)


def drawn_text_boxes(fig) -> list[tuple[str, object]]:
    """(text, window extent) of every piece of text drawn: point labels (with their leader lines), legends,
    titles, axis labels and tick labels."""
    fig.canvas.draw()
    boxes = []
    for ax in fig.axes:
        texts = list(ax.texts) + [ax.title, ax.xaxis.label, ax.yaxis.label]
        for axis, (low, high) in ((ax.xaxis, sorted(ax.get_xlim())), (ax.yaxis, sorted(ax.get_ylim()))):
            texts += [t for at, t in zip(axis.get_majorticklocs(), axis.get_majorticklabels())
                      if low <= at <= high and t.get_visible()]  # labels of ticks outside the view are not drawn
        boxes += [(t.get_text(), t.get_window_extent()) for t in texts if t.get_text().strip()]
        legend = ax.get_legend()
        boxes += [("legend", legend.get_window_extent())] if legend else []
    boxes += [("legend", legend.get_window_extent()) for legend in fig.legends]
    return boxes


def test_no_figure_overprints_any_text(demo_like, monkeypatch):
    """Before: the Pareto legend sat over "ICL (4-shot)" and Best-of-N labels ran past the frame."""
    drawn = []
    keep = figures.png
    monkeypatch.setattr(figures, "png", lambda fig: (drawn.append(drawn_text_boxes(fig)), keep(fig))[1])
    build_html_report(demo_like)
    assert len(drawn) == 4  # the verdict figure and Figures 1-3
    for boxes in drawn:
        clashes = [(a, b) for (a, box_a), (b, box_b) in itertools.combinations(boxes, 2) if box_a.overlaps(box_b)]
        assert not clashes, clashes


def test_the_cost_axis_reads_as_multiples_and_means_carry_error_bars(demo_like, monkeypatch):
    """Before: the log axis read "2×10⁰, 3×10⁰" and no figure had error bars."""
    seen = []
    keep = figures.png
    monkeypatch.setattr(figures, "png", lambda fig: (seen.append(fig), fig.canvas.draw(), keep(fig))[2])
    build_html_report(demo_like)
    pareto = next(f.axes[0] for f in seen if f.axes[0].get_xlabel().startswith("counted generation cost"))
    low, high = pareto.get_xlim()
    ticks = [t.get_text() for at, t in zip(pareto.get_xticks(), pareto.get_xticklabels()) if low <= at <= high]
    assert ticks and all(re.fullmatch(r"[\d.]+×", t) for t in ticks), ticks
    for fig in seen:
        assert any(type(c).__name__ == "LineCollection" for ax in fig.axes for c in ax.collections), fig


def test_the_page_reads_top_down_with_samples_and_what_next(demo_like):
    page = build_html_report(demo_like).read_text()
    text = re.sub(r"<[^>]+>", "", page)
    verdict = page.index("<h2>Verdict")
    assert verdict < page.index("For these users") < page.index("<table>", verdict)  # the sentence, then the table
    assert "`" not in text and "D_k^demo" not in text and "<code>" in page  # Markdown rendered, not leaked
    assert "± 0.00" not in page  # one seed: a value, not a spread of zero
    samples = page.index("<h2>Sample generations")
    assert "the user&#x27;s own text" in page[samples:] or "the user's own text" in page[samples:]
    assert "Article 0 by u1 \\| with a pipe" not in page and "Article 0 by u1 | with a pipe" in text
    assert page.rindex("<h2>") == page.index("<h2>What next") and "persalign plan CONFIG --from-run" in text


@pytest.mark.needs_browser
def test_the_page_renders_in_a_headless_browser(demo_like, tmp_path):
    page = build_html_report(demo_like)
    shot = tmp_path / "page.png"
    done = subprocess.run(["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--window-size=1200,4000",
                           f"--screenshot={shot}", page.as_uri()], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and shot.stat().st_size > 10_000, done.stderr
