"""The verdict (issue #18): ranked deployments, costs, Pareto front and the sentence, on a stored fixture."""

import base64
import io
import json
import re
from html.parser import HTMLParser

import pytest

from persalign.analysis.study import analyse
from persalign.report.html import build_html_report
from persalign.report.markdown import build_report, results_frame
from persalign.report.verdict import verdict_rows
from persalign.runner.store import Cell, RunStore
from tests.stored_runs import run_of

USERS = [f"u{i}" for i in range(1, 9)]  # 8: the fewest users an interval is printed for
# label, deployment name, ROUGE-1 per user offset, generation seconds, counted GFLOPs per output, adapt seconds
SPEC = [
    ("Zero-Shot", "zero_shot", 10.0, 8.0, 4, None),
    ("ICL-RAG", "icl_rag", 20.0, 80.0, 12, None),  # counted 3x greedy (measured 10x: the machine was busy)
    ("Cheap RM", "args", 12.0, 16.0, 8, 8.0),      # counted 2x greedy, worse than ICL-RAG
    ("Slow RM", "args", 11.0, 24.0, 40, 2.0),      # counted 10x greedy and worse than ICL-RAG: dominated
]


def jitter(label: str, user: int) -> float:
    """A small per-(deployment, user) wobble: real differences between users are never all equal."""
    return 0.1 * ((3 * user + len(label)) % 5)


def write_cell(store, index, label, name, rouge, seconds, gflops, adapt):
    cell = Cell("pol", label, 0)
    rows = [{"id": f"{u}-{k}", "user": u, "batch": 0, "generation": "x", "generated_tokens": 4,
             "rouge1": rouge + i + k + jitter(label, i), "policy_correct": float(k == 0), "s_chosen": 1.0,
             "s_rejected": 0.0} for i, u in enumerate(USERS) for k in range(2)]
    if name == "args":
        rows = [{**r, "rm_correct": 1.0, "win": 1.0} for r in rows]
    store.append(cell, "rows.jsonl", rows)
    training = {"adapt_s": adapt, "adapt_work": {"flops_per_user": 1e9 * adapt}} if adapt is not None else None
    settings = {"decoder_name": name} | ({"training": training} if training else {})
    store.write_metrics(cell, {"policy": "pol", "decoder": label, "decoder_name": name, "decoder_index": index,
                               "seed": 0, "seed_dependent": name != "zero_shot", "examples": len(rows), "users": 8, "policy_ties": 0.0, "rouge1": rouge,
                               "policy_accuracy": 50.0, "stage_seconds": {"generation_s": seconds},
                               "counted_work": {"flops_per_output": 1e9 * gflops, "outputs": len(rows)},
                               "settings": settings})


@pytest.fixture
def stored_run(tmp_path):
    return run_of(tmp_path / "run", SPEC, write_cell)


def test_verdict_ranks_by_quality_with_costs_relative_to_greedy_and_the_pareto_front(stored_run):
    store = RunStore(stored_run)
    (analysis,) = analyse(stored_run)
    rows = verdict_rows(store, results_frame(store), analysis)
    assert [r.label for r in rows] == ["ICL-RAG", "Cheap RM", "Slow RM", "Zero-Shot"]
    by_label = {r.label: r for r in rows}
    # counted: greedy 4 GFLOP per output, ICL-RAG 12 -> 3x, Slow RM 40 -> 10x; seconds only stand beside them
    assert by_label["ICL-RAG"].relative_cost == pytest.approx(3.0)
    assert by_label["Slow RM"].relative_cost == pytest.approx(10.0)
    assert by_label["Zero-Shot"].relative_cost == pytest.approx(1.0)
    assert by_label["ICL-RAG"].seconds_per_output == pytest.approx(5.0)  # 80 s for 16 outputs
    assert by_label["Cheap RM"].adapt == {"flops": 8e9, "seconds": pytest.approx(1.0)}  # 8 s over 8 users
    assert by_label["ICL-RAG"].adapt is None  # nothing is trained
    wobble = sum(jitter("ICL-RAG", i) for i in range(8)) / 8
    assert by_label["ICL-RAG"].quality["mean"] == pytest.approx(20 + 3.5 + 0.5 + wobble)  # users 0..7, items 0..1
    assert 0 <= by_label["ICL-RAG"].quality["low"] < by_label["ICL-RAG"].quality["mean"]
    assert {r.label for r in rows if r.pareto} == {"ICL-RAG", "Cheap RM", "Zero-Shot"}  # Slow RM is dominated


def test_report_opens_with_the_verdict_and_its_sentence_comes_from_the_numbers(stored_run):
    text = build_report(stored_run)
    headings = [line for line in text.splitlines() if line.startswith("## ")]
    assert headings[0].startswith("## Verdict")
    assert "| 1 | ICL-RAG | 24.19 [" in text and "| 50.00 (no interval: every user equal) |" in text and "| 3.00× | 5.000 |" in text
    sentence = next(line for line in text.splitlines() if line.startswith("For these users"))
    # every user gains 8 points (± the wobble) over the best reward method: the interval is narrow, above 0
    assert re.match(
        r"For these users, ICL-RAG writes closest to their own text \(ahead of Cheap RM by \+\d\.\d\d ROUGE-1 "
        r"\[\+\d\.\d\d, \+\d\.\d\d\]\), at 3\.0× the counted cost of greedy; "
        r"the best ICL variant \(ICL-RAG\) beats the best reward method that steers \(Cheap RM\) by \+7\.\d\d "
        r"ROUGE-1 \[\+7\.\d\d, \+8\.\d\d\]\. Cross-fitted \(winners chosen on one half of the users, measured on "
        r"the other: the gap between the winners a half picks, best − best where they are clear\); these 8 users "
        r"detect", sentence), sentence


def test_when_the_interval_includes_zero_the_verdict_says_the_data_cannot_separate_them(tmp_path):
    store = RunStore(tmp_path / "run")
    store.root.mkdir(parents=True)
    (store.root / "config.yaml").write_text("name: fixture\ndata: {dataset: demo}\n")
    write_cell(store, 0, "Zero-Shot", "zero_shot", 10.0, 8.0, 4, None)
    write_cell(store, 1, "ICL", "icl", 12.0, 16.0, 8, None)
    cell = Cell("pol", "RM", 0)  # better for half the users, worse for half: the difference straddles 0
    rows = [{"id": f"{u}-0", "user": u, "batch": 0, "generation": "x", "generated_tokens": 4,
             "rouge1": 12.0 + i + (9, -9, 8, -7, 9, -8, 7, -9)[i], "policy_correct": 1.0, "rm_correct": 1.0,
             "win": 1.0, "s_chosen": 1.0, "s_rejected": 0.0} for i, u in enumerate(USERS)]
    store.append(cell, "rows.jsonl", rows)
    store.write_metrics(cell, {"policy": "pol", "decoder": "RM", "decoder_name": "args", "decoder_index": 2, "seed": 0, "seed_dependent": True,
                               "examples": 8, "users": 8, "policy_ties": 0.0, "rouge1": 12.0, "policy_accuracy": 1.0,
                               "stage_seconds": {"generation_s": 4.0}, "settings": {"decoder_name": "args"}})
    text = build_report(store.root)
    assert "the data cannot separate the best ICL variant (ICL) from the best reward method that steers (RM)" in text


def test_html_report_embeds_the_quality_vs_cost_figure_and_every_table_has_its_columns(stored_run):
    from PIL import Image

    page = build_html_report(stored_run).read_text(encoding="utf-8")

    class Parse(HTMLParser):
        def __init__(self):
            super().__init__()
            self.images, self.tables, self.row = [], [], None

        def handle_starttag(self, tag, attrs):
            if tag == "img":
                self.images.append(dict(attrs))
            elif tag == "table":
                self.tables.append([])
            elif tag == "tr":
                self.row = []
                self.tables[-1].append(self.row)
            elif tag in ("td", "th"):
                self.row.append(tag)

    parser = Parse()
    parser.feed(page)
    assert any("quality vs cost" in image["alt"] for image in parser.images)
    for image in parser.images:  # every embedded image decodes as a PNG of a sensible size
        picture = Image.open(io.BytesIO(base64.b64decode(image["src"].split(",", 1)[1])))
        assert picture.format == "PNG" and picture.size[0] > 200 and picture.size[1] > 100
    for table in parser.tables:  # every row has the cells its header announces
        assert all(len(row) == len(table[0]) for row in table[1:]), table[0]
    assert re.search(r"<h2>Verdict figure", page).start() < page.index("<h2>Policy:")


def test_a_reward_method_that_chose_lambda_zero_is_labelled_greedy_and_is_no_finding3_candidate(tmp_path):
    """Issue #39: λ = 0 is the reward switched off. Before, the verdict named such a method 'best reward method'
    and Finding 3 compared ICL with greedy decoding under another name."""
    store = RunStore(tmp_path / "run")
    store.root.mkdir(parents=True)
    (store.root / "config.yaml").write_text("name: fixture\ndata: {dataset: demo}\n")
    for index, spec in enumerate(SPEC):
        write_cell(store, index, *spec)
    write_cell(store, 4, "Off RM", "args", 14.0, 8.0, 4, 1.0)  # better than both steering RMs, but λ = 0
    metrics = store.cell_dir(Cell("pol", "Off RM", 0)) / "metrics.json"
    stored = json.loads(metrics.read_text())
    stored["settings"]["lambda"] = 0.0
    metrics.write_text(json.dumps(stored))
    (analysis,) = analyse(store.root)
    assert analysis.best_reward.label == "Cheap RM"
    assert [m.label for m in analysis.switched_off] == ["Off RM (λ = 0: greedy)"]
    text = build_report(store.root)
    assert "| Off RM (λ = 0: greedy) |" in text and "= greedy (λ = 0)" in text
    assert "beats the best reward method that steers (Cheap RM)" in text
    assert "1 of 3 reward methods (Off RM) chose λ = 0: the reward switched off, greedy decoding." in text


def test_argss_steps_that_a_cut_reward_input_made_greedy_are_reported(stored_run):
    store = RunStore(stored_run)
    metrics = store.cell_dir(Cell("pol", "Cheap RM", 0)) / "metrics.json"
    stored = json.loads(metrics.read_text())
    stored["settings"]["truncation_ties"] = 7
    metrics.write_text(json.dumps(stored))
    assert "because the reward model cut its input (hf_rm max_length; ARGS was greedy there): Cheap RM 7" in \
        build_report(stored_run)
