"""End-to-end runs on the tiny model, resume after an interruption, report, CLI errors."""

import json

import numpy as np
import pytest

from persalign import cli
from persalign.core.config import load_config
from persalign.core.errors import ConfigError
from persalign.report.markdown import build_report
from persalign.runner import evaluate
from persalign.runner.run import run
from persalign.runner.store import Cell, RunStore

TINY = [
    "policies=[tiny-llama]", "data.embedder=hashing-bow", "metrics.names=[rouge]",
    "generation.max_new_tokens=6", "generation.batch_size=4", "split.max_query_per_user=5", "seeds=[0,1]",
]


def tiny_config(*extra):
    return load_config("demo-baselines", TINY + list(extra))


def all_rows(store):
    return {p.parent.relative_to(store.root).as_posix(): [json.loads(line) for line in p.read_text().splitlines()]
            for p in sorted(store.root.glob("cells/*/*/*/rows.jsonl"))}


def metrics_without_timing(store):
    return [{k: v for k, v in m.items() if k not in ("stage_seconds", "stage_flops", "peak_memory_mib")}
            for m in store.all_metrics()]


def test_end_to_end_run_writes_rows_metrics_provenance_and_report(tmp_path, cache_dir):
    store = run(tiny_config(), tmp_path / "run", log=lambda *_: None)
    metrics = store.all_metrics()
    assert len(metrics) == 4  # zero-shot and ICL-RAG once (seed-free), ICL for 2 seeds
    for m in metrics:
        assert m["examples"] == 15 and m["users"] == 3
        assert 0 <= m["policy_accuracy"] <= 100 and 0 <= m["rouge1"] <= 100
        assert set(m["stage_seconds"]) == {"prompts_s", "generation_s", "scoring_s", "metrics_s"}
    rows = all_rows(store)
    for cell_rows in rows.values():
        assert len({r["id"] for r in cell_rows}) == len(cell_rows) == 15
        assert {"user", "prompt", "reference", "generation", "rouge1", "s_chosen", "s_rejected"} <= set(cell_rows[0])
    provenance = json.loads((store.root / "provenance.json").read_text())["runs"][0]
    assert provenance["seeds"] == [0, 1] and "transformers" in provenance["packages"] and provenance["git"]
    report = build_report(store.root)
    assert "| Zero-Shot |" in report and "| ICL (4-shot) |" in report and "| ICL-RAG (4-shot) |" in report
    assert (store.root / "report.md").exists()


def test_same_config_and_seed_give_the_same_numbers(tmp_path, cache_dir):
    a = run(tiny_config(), tmp_path / "a", log=lambda *_: None)
    b = run(tiny_config(), tmp_path / "b", log=lambda *_: None)
    assert metrics_without_timing(a) == metrics_without_timing(b)


def test_interrupted_run_resumes_to_identical_metrics_without_duplicates(tmp_path, cache_dir, monkeypatch):
    fresh = run(tiny_config(), tmp_path / "fresh", log=lambda *_: None)

    real = evaluate.evaluate_batch
    calls = {"n": 0}

    def dies_on_the_sixth_batch(*args):
        calls["n"] += 1
        if calls["n"] == 6:
            raise KeyboardInterrupt
        return real(*args)

    monkeypatch.setattr(evaluate, "evaluate_batch", dies_on_the_sixth_batch)
    with pytest.raises(KeyboardInterrupt):
        run(tiny_config(), tmp_path / "resumed", log=lambda *_: None)
    store = RunStore(tmp_path / "resumed")
    partial = all_rows(store)
    # Zero-shot finished (15 rows in 4 batches); ICL seed 0 kept its one finished batch (its shortest prompts).
    (unfinished,) = [rows for rows in partial.values() if len(rows) != 15]
    assert len(store.all_metrics()) == 1 and 1 <= len(unfinished) <= 4
    assert {row["batch"] for row in unfinished} == {0}
    # A kill in the middle of a write leaves a torn last line: it must be dropped, not crash.
    (torn,) = [p for p in store.root.glob("cells/*/*/*/rows.jsonl") if not (p.parent / "metrics.json").exists()]
    with torn.open("a") as handle:
        handle.write('{"id": "half-writ')

    monkeypatch.setattr(evaluate, "evaluate_batch", real)
    resumed = run(tiny_config(), tmp_path / "resumed", log=lambda *_: None)
    assert metrics_without_timing(resumed) == metrics_without_timing(fresh)
    assert all_rows(resumed) == all_rows(fresh)


def test_rerun_of_a_complete_run_skips_everything(tmp_path, cache_dir, monkeypatch):
    run(tiny_config(), tmp_path / "r", log=lambda *_: None)
    monkeypatch.setattr(evaluate, "evaluate_batch", lambda *a: pytest.fail("recomputed a finished batch"))
    messages = []
    run(tiny_config(), tmp_path / "r", log=messages.append)
    assert "4 already complete" in messages[0]


def test_a_run_dir_of_another_config_is_refused(tmp_path, cache_dir):
    run(tiny_config(), tmp_path / "r", log=lambda *_: None)
    with pytest.raises(ConfigError, match="different config"):
        run(tiny_config("generation.max_new_tokens=7"), tmp_path / "r", log=lambda *_: None)


def test_cli_prints_one_clean_error_line(tmp_path, capsys):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"user": "a", "input": "x"}\n')
    code = cli.main(["data", "summary", "demo-baselines", "data.dataset=completions_jsonl", "data.task=headline", f"data.path={bad}",
                     "data.embedder=hashing-bow"])
    err = capsys.readouterr().err
    assert code == 2
    assert err.strip() == f"persalign: error: {bad}, record line 1: field 'output' is missing"


def test_cli_list_shows_every_registry(capsys):
    assert cli.main(["list"]) == 0
    out = capsys.readouterr().out
    for name in ["news_category", "lamp", "demo", "zero_shot", "icl_rag", "rouge", "bertscore",
                 "smollm2-135m-instruct", "minilm-l6", "tiny-llama"]:
        assert name in out


def test_a_run_can_be_extended_with_more_cells(tmp_path, cache_dir, monkeypatch):
    run(tiny_config("decoders=[{name: zero_shot}]"), tmp_path / "r", log=lambda *_: None)
    before = metrics_without_timing(RunStore(tmp_path / "r"))
    messages = []
    store = run(tiny_config("decoders=[{name: zero_shot}, {name: icl, shots: 2}]"), tmp_path / "r",
                log=messages.append)
    assert "1 already complete" in messages[0]
    after = metrics_without_timing(store)
    assert len(after) == 3 and before[0] in after


def test_html_report_is_valid_and_embeds_figures(tmp_path, cache_dir):
    from html.parser import HTMLParser

    from persalign.report.html import build_html_report

    store = run(tiny_config("'methods=[{name: global_rm}, {name: global_rm_v2}, {name: lore}]'".strip("'"),
                            "reward.epochs=5", "args.selection=fixed"), tmp_path / "r", log=lambda *_: None)
    path = build_html_report(store.root)
    text = path.read_text()

    class Collect(HTMLParser):
        def __init__(self):
            super().__init__()
            self.tags, self.images = [], []

        def handle_starttag(self, tag, attrs):
            self.tags.append(tag)
            if tag == "img":
                self.images.append(dict(attrs)["src"])

    parser = Collect()
    parser.feed(text)
    assert text.startswith("<!DOCTYPE html>") and "table" in parser.tags
    assert len(parser.images) == 4 and all(src.startswith("data:image/png;base64,") for src in parser.images)
    rouge = [m for m in store.all_metrics() if m["decoder"] == "Zero-Shot"][0]["rouge1"]
    policy_table = text[text.index("<h2>Policy:"):]
    zero_shot = policy_table[policy_table.index("<td>Zero-Shot</td>"):].split("</tr>")[0]
    assert f"<td>{rouge:.2f}</td>" in zero_shot and "±" not in zero_shot  # issue #43: seed-free, no "± 0.00"


@pytest.mark.slow
def test_genarm_and_pdpo_cells_run_and_report_dashes_where_pdpo_has_no_rm(tmp_path, cache_dir):
    from persalign.report.markdown import build_report

    config = tiny_config("'methods=[{name: genarm}, {name: pdpo}]'".strip("'"), "reward.epochs=3",
                         "args.selection=fixed", "decoders=[{name: zero_shot}]", "seeds=[0]")
    store = run(config, tmp_path / "r", log=lambda *_: None)
    metrics = {m["decoder"]: m for m in store.all_metrics()}
    assert {"GenARM", "P-DPO"} <= set(metrics)
    assert "rm_accuracy" not in metrics["P-DPO"] and 0 <= metrics["P-DPO"]["policy_accuracy"] <= 100
    assert metrics["P-DPO"]["settings"]["training"]["steps"] == 40  # the stated default cap
    assert 0 <= metrics["GenARM"]["rm_accuracy"] <= 100 and "win_rate" in metrics["GenARM"]
    pdpo_row = [line for line in build_report(store.root).splitlines() if line.startswith("| P-DPO |")][0]
    assert pdpo_row.split("|")[2].strip() == "-"  # RM Acc column
    before = metrics_without_timing(store)
    again = run(config, tmp_path / "r", log=lambda *_: None)  # resumed: nothing recomputed
    assert metrics_without_timing(again) == before


def test_best_of_n_cells_share_one_sample_set_and_nested_picks_never_lose_rm_score(tmp_path, cache_dir):
    config = tiny_config("'methods=[{name: global_rm}, {name: lore}]'".strip("'"), "reward.epochs=3",
                         "args.enabled=false", "best_of_n.enabled=true", "best_of_n.ns=[1,2,4]",
                         "decoders=[{name: zero_shot}]", "seeds=[0]")
    store = run(config, tmp_path / "r", log=lambda *_: None)
    metrics = {m["decoder"]: m for m in store.all_metrics()}
    assert set(metrics) == {"Zero-Shot", "Global RM (Best-of-N)", "LoRE (Best-of-N)"}  # no ARGS cells
    samples = {json.loads(line)["id"]: json.loads(line)["samples"]
               for line in (store.root / "samples/tiny-llama/seed-0.jsonl").read_text().splitlines()}
    for label in ("Global RM (Best-of-N)", "LoRE (Best-of-N)"):
        rows = [json.loads(line) for line in (store.cell_dir(Cell("tiny-llama", label, 0)) / "rows.jsonl")
                .read_text().splitlines()]
        for row in rows:
            assert len(samples[row["id"]]) == 4 and row["generation"] in samples[row["id"]]
            assert row["rm_score@1"] <= row["rm_score@2"] <= row["rm_score@4"] == row["rm_score"]
            assert row["rouge1@4"] == row["rouge1"]
        curve = metrics[label]["settings"]["curves"]["rm_score"]
        assert list(curve) == ["1", "2", "4"] or list(curve) == [1, 2, 4]
        assert 0 <= metrics[label]["rm_accuracy"] <= 100


def test_pair_only_data_gets_ranking_cells_without_generation(tmp_path, cache_dir):
    rng = np.random.default_rng(0)
    lines = []
    for u in range(8):
        for k in range(10):
            text = " ".join(rng.choice(["red", "cat", "sun", "dog"], size=3))
            bang = u % 2 == 0
            lines.append(json.dumps({"user": f"u{u}", "prompt": f"post {u}-{k}", "chosen": text + ("!" if bang else "."),
                                     "rejected": text + ("." if bang else "!")}))
    path = tmp_path / "prefs.jsonl"
    path.write_text("\n".join(lines) + "\n")
    config = tiny_config("data.dataset=preferences_jsonl", "data.task=chat", f"data.path={path}",
                         "data.min_items_per_user=5", "'methods=[{name: global_rm}]'".strip("'"), "reward.epochs=3",
                         "decoders=[{name: zero_shot}]", "seeds=[0]")
    store = run(config, tmp_path / "r", log=lambda *_: None)
    metrics = {m["decoder"]: m for m in store.all_metrics()}
    assert metrics["Zero-Shot"]["examples"] > 0 and 0 <= metrics["Zero-Shot"]["policy_accuracy"] <= 100
    assert 0 <= metrics["Global RM"]["rm_accuracy"] <= 100 and "win_rate" not in metrics["Global RM"]
    assert "rouge1" not in metrics["Global RM"]
    rows = [json.loads(line) for line in (store.cell_dir(Cell("tiny-llama", "Global RM", 0)) / "rows.jsonl")
            .read_text().splitlines()]
    assert all(r["generation"] is None and r["reference"] is None for r in rows)


def test_report_shows_best_of_n_curves_and_the_rm_accuracy_correlation(tmp_path, cache_dir):
    config = tiny_config("'methods=[{name: global_rm}, {name: lore}, {name: mpu}]'".strip("'"), "reward.epochs=3",
                         "args.enabled=false", "best_of_n.enabled=true", "best_of_n.ns=[1,2]",
                         "decoders=[{name: zero_shot}]", "seeds=[0]")
    store = run(config, tmp_path / "r", log=lambda *_: None)
    report = build_report(store.root)
    assert "## Best-of-N" in report and "ROUGE-1 @N=2" in report
    rows = [line for line in report.splitlines() if line.startswith("| Kendall τ: RM Acc vs ROUGE-1 @N_max")]
    assert rows and ("n=3" in rows[0] or "n/a" in rows[0])
    lore = next(line for line in report.splitlines() if line.startswith("| LoRE (Best-of-N) |"))
    curve = [m for m in store.all_metrics() if m["decoder"] == "LoRE (Best-of-N)"][0]["settings"]["curves"]["rouge1"]
    assert f"{curve['2']:.2f}" in lore
