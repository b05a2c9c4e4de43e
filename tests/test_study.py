"""Study analyses on a hand-built stored run (exact numbers), and a tiny-model end-to-end study."""

import json
from html.parser import HTMLParser

import numpy as np
import pytest
from scipy import stats

from persalign.analysis.study import analyse
from persalign.report.markdown import build_report
from persalign.runner.store import Cell, RunStore
from tests.stored_runs import empty_run

USERS = ["u1", "u2", "u3", "u4"]
ITEMS = {u: [f"{u}-{k}" for k in range(2)] for u in USERS}


def write_cell(store, label, kind, index, seed, per_user: dict[str, dict]):
    """per_user[user] -> row values shared by that user's two items."""
    cell = Cell("pol", label, seed)
    rows = [{"id": i, "user": u, "batch": 0, "generation": "x", "s_chosen": 1.0, "s_rejected": 0.0, **per_user[u]}
            for u in USERS for i in ITEMS[u]]
    store.append(cell, "rows.jsonl", rows)
    store.write_metrics(cell, {"policy": "pol", "decoder": label, "decoder_name": kind, "decoder_index": index,
                               "seed": seed, "seed_dependent": kind != "zero_shot", "examples": len(rows),
                               "users": 4, "policy_ties": 0.0, "stage_seconds": {}, "settings": {},
                               **{k: 0.0 for k in ("rouge1", "policy_accuracy")}})


@pytest.fixture
def stored_run(tmp_path):
    store = empty_run(tmp_path / "run")
    write_cell(store, "Zero-Shot", "zero_shot", 0, 0, {u: {"rouge1": 10.0, "policy_correct": 0.0} for u in USERS})
    write_cell(store, "ICL-RAG", "icl_rag", 1, 0, {u: {"rouge1": 20.0 + k, "policy_correct": 1.0}
                                                    for k, u in enumerate(USERS)})
    # three reward methods; RM accuracy ranks them A > B > C, policy accuracy C > B > A
    spec = {"A": (1.0, 0.0, 11.0), "B": (0.5, 0.5, 12.0), "C": (0.0, 1.0, 9.0)}  # rm_correct, policy_correct, rouge1
    for index, (label, (rm, pol, rouge)) in enumerate(spec.items(), 2):
        for seed in (0, 1):
            write_cell(store, label, "args", index, seed,
                       {u: {"rm_correct": rm, "policy_correct": pol, "rouge1": rouge + seed, "win": 1.0}
                        for u in USERS})
    return store.root


def test_study_analysis_gives_the_hand_computed_numbers(stored_run):
    (analysis,) = analyse(stored_run)
    means = {m.label: m for m in analysis.methods}
    assert means["A"].mean("rm_accuracy") == 100 and means["C"].mean("policy_accuracy") == 100
    assert means["B"].mean("rouge1") == pytest.approx(12.5)  # seeds averaged per user first: (12 + 13) / 2
    assert means["B"].mean("rouge1_gain") == pytest.approx(2.5)  # vs zero-shot's 10 on the same ids
    assert means["C"].mean("true_win_rate") == 0  # 9 < 10 (seed 0); 10 = 10 is no strict win (seed 1)
    assert means["A"].mean("true_win_rate") == 100  # 11 and 12 both beat 10
    kendall = analysis.rm_vs_policy["kendall"]
    assert kendall["point"].value == pytest.approx(stats.kendalltau([100, 50, 0], [0, 50, 100])[0]) == -1
    # 3 methods: no interval reaches its coverage for Kendall's τ below 6, so none is printed, and it says why
    assert kendall["low"] is None and "6 needed" in kendall["reason"]
    assert analysis.best_icl.label == "ICL-RAG" and analysis.best_reward.label == "B"
    difference = analysis.icl_minus_reward["rouge1"]
    assert difference["mean"] == pytest.approx(np.mean([20, 21, 22, 23]) - 12.5)
    win = analysis.win_vs_gain["kendall"]["point"]
    assert win.value is None and "constant" in win.reason  # every method wins 100%: said, not NaN


def test_report_has_the_study_tables_and_generated_findings(stored_run):
    text = build_report(stored_run)
    for title in ("Table 2", "Table 4", "Table 5", "Table 6", "Finding 3", "Findings (generated"):
        assert title in text
    assert "| Kendall τ | - | observed -1.00 (no interval) (n=3); true means: no interval (4 users, 3 methods" in text
    assert "best ICL variant (ICL-RAG) − best reward method (B), ROUGE-1, cross-fitted (the gap between the winners a half of the users picks): +9.00" in text


def test_figure1_labels_of_near_equal_methods_never_overprint():
    """The study's cluster: several methods within 1 point of each other on both axes."""
    import matplotlib.pyplot as plt

    from persalign.report.html import _label_points

    xs, ys = [53.0, 65.4, 68.8, 69.7, 69.2, 69.2, 69.7, 70.5, 70.5, 70.9], \
        [72.2, 71.8, 72.2, 72.2, 71.8, 71.4, 71.4, 66.7, 65.8, 73.9]
    labels = ["MPU", "MPU-Avg", "LoRE", "LoRE-Alt", "PAL", "Global RM-v2", "PReF", "Global RM", "GenARM", "VPL"]
    fig, ax = plt.subplots(figsize=(5, 4))
    ax.scatter(xs, ys)
    _label_points(ax, xs, ys, labels)
    fig.canvas.draw()
    boxes = [t.get_window_extent() for t in ax.texts]
    plt.close(fig)
    assert len(boxes) == len(labels)
    assert not [(a, b) for i, a in enumerate(labels) for j, b in enumerate(labels)
                if i < j and boxes[i].overlaps(boxes[j])]


def test_tiny_end_to_end_study_writes_reports_index_and_figures(tmp_path, cache_dir):
    from persalign.cli.study import run_study
    from tests.test_runner import TINY

    tiny = [o for o in TINY if not o.startswith(("seeds=", "split.max_query_per_user="))]  # --quick sets these
    overrides = tiny + ["methods=[{name: global_rm}, {name: lore}, {name: mpu}]", "args.selection=fixed",
                        "decoders=[{name: zero_shot}, {name: icl, shots: 1}, {name: icl, shots: 2}, "
                        "{name: icl_rag, shots: 2}]"]
    messages = []
    (run_dir,) = run_study(["demo-baselines"], overrides, str(tmp_path / "study"), quick=True, log=messages.append)
    assert any(m.startswith("progress ") and "ETA" in m for m in messages)
    assert (tmp_path / "study" / "index.md").read_text().count("- ") >= 2  # findings copied into the index
    report = (run_dir / "report.md").read_text()
    store = RunStore(run_dir)
    assert len(store.all_metrics()) == 4 + 3  # seed-free baselines once, --quick keeps one seed
    lore = [json.loads(line) for line in (run_dir / "cells/tiny-llama/LoRE/seed-0/rows.jsonl").read_text().splitlines()]
    by_user = {}
    for row in lore:
        by_user.setdefault(row["user"], []).append(row["rm_correct"])
    assert f"| LoRE | {100 * np.mean([np.mean(v) for v in by_user.values()]):.2f} (no interval: 3 users) |" in report

    class Collect(HTMLParser):
        images = 0

        def handle_starttag(self, tag, attrs):
            self.images += tag == "img"

    parser = Collect()
    parser.feed((run_dir / "report.html").read_text())
    assert parser.images == 4  # Figures 1-3 and the verdict's quality-vs-cost figure
