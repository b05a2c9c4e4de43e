"""The bad-input suite: every case is one clear line and a non-zero exit, and nothing already computed is lost.

Grows with the code: one test (or parameter) per case found by the hostile-input probe (issue #15).
"""

import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

from persalign import cli
from persalign.runner.lock import RunLockedError, locked
from persalign.runner.run import run
from tests.test_runner import TINY, metrics_without_timing, tiny_config

QUIET = dict(log=lambda *_: None)


def cli_error(capsys, argv) -> str:
    """Run the CLI, expect a non-zero exit and exactly one line on stderr; return that line."""
    code = cli.main(argv)
    err = capsys.readouterr().err.strip().splitlines()
    assert code != 0, err
    assert len(err) == 1, err
    return err[0]


@pytest.mark.parametrize("override, message", [
    ("generation.batch_size=0", "generation.batch_size: 0 is not allowed (must be a number >= 1)"),
    ("generation.max_new_tokens=-1", "generation.max_new_tokens: -1 is not allowed (must be a number >= 1)"),
    ("args.top_k=0", "args.top_k: 0 is not allowed (must be a number >= 1)"),
    ("args.lambdas=[]", "args.lambdas: [] is not allowed (must be a non-empty list of distinct finite numbers >= 0)"),
    ("best_of_n.ns=[]", "best_of_n.ns: [] is not allowed (must be a non-empty list of integers >= 1)"),
    ("args.selection=bogus", "args.selection: 'bogus' is not allowed (must be one of ['auto', 'policy_accuracy', "
                             "'harmonic', 'fixed'])"),
    ("decoders=[{name: icl, shots: -2}]", "decoders[0].shots: -2 is not allowed (must be a number >= 0)"),
    ("seeds=[]", "seeds: [] is not allowed (must be a non-empty list of distinct integers >= 0)"),
    ("seeds=[-1]", "seeds: [-1] is not allowed (must be a non-empty list of distinct integers >= 0)"),
    ("seeds=[0,0]", "seeds: [0, 0] is not allowed (must be a non-empty list of distinct integers >= 0)"),
    ("data.seed=-3", "data.seed: -3 is not allowed (must be an integer >= 0)"),
    ("split.seed=-1", "split.seed: -1 is not allowed (must be an integer >= 0)"),
    ("args.lambdas=[0, .inf]", "args.lambdas: [0.0, inf] is not allowed (must be a non-empty list of distinct finite "
                               "numbers >= 0)"),
    ("args.fixed_lambda=-1", "args.fixed_lambda: -1.0 is not allowed (must be a finite number >= 0)"),
    ("reward.lora_rank=0", "reward.lora_rank: 0 is not allowed (must be a number >= 1)"),
    ("methods=[{name: lore, head_lr: -0.001}]", "methods[0].head_lr: -0.001 is not allowed (must be empty (null) or a "
                                               "finite number > 0)"),
    ("split.support_fraction=1.5", "split.support_fraction: 1.5 is not allowed (must be a fraction strictly between "
                                   "0 and 1)"),
])
def test_out_of_range_config_values_are_refused_before_any_work(tmp_path, capsys, override, message):
    line = cli_error(capsys, ["run", "demo-baselines", "-o", str(tmp_path / "run"), override])
    assert line.startswith("persalign: error: ") and line.endswith(message)
    assert not (tmp_path / "run").exists()


def test_a_run_dir_that_is_a_file_is_refused(tmp_path, capsys):
    target = tmp_path / "file.txt"
    target.write_text("keep me")
    line = cli_error(capsys, ["run", "demo-baselines", "-o", str(target)] + TINY)
    assert line == f"persalign: error: {target}: the run directory is a file; choose another output folder (-o)"
    assert target.read_text() == "keep me"


def test_labels_cannot_leave_the_cell_folder_or_collide(tmp_path, capsys, cache_dir):
    store = run(tiny_config("seeds=[0]", "decoders=[{name: zero_shot, label: '..'}]"), tmp_path / "run", **QUIET)
    written = [p for p in tmp_path.rglob("*") if p.is_file() and cache_dir not in p.parents]
    assert all(store.root in p.parents for p in written)
    capsys.readouterr()
    line = cli_error(capsys, ["run", "demo-baselines", "-o", str(tmp_path / "b")] + TINY
                     + ["decoders=[{name: zero_shot, label: 'a b'}, {name: icl, shots: 1, label: 'a_b'}]"])
    assert line.endswith("labels 'a b' and 'a_b' map to the same result folder "
                         "cells/tiny-llama/a_b/seed-0; give one of them another `label`")


def test_shots_larger_than_the_support_set_are_clipped_recorded_and_reported(tmp_path, cache_dir):
    store = run(tiny_config("seeds=[0]", "decoders=[{name: icl_rag, shots: 500}]"), tmp_path / "run", **QUIET)
    (metrics,) = store.all_metrics()
    assert metrics["demos_used_max"] < 500 if "demos_used_max" in metrics else metrics["demos_used_mean"] < 500
    from persalign.report.markdown import build_report

    report = build_report(store.root)
    cut = f"; {metrics['prompts_cut']} prompts cut to fit generation.max_prompt_tokens" if metrics["prompts_cut"] else ""
    assert f"ICL-RAG (500-shot) ({metrics['demos_used_mean']:.1f} demos used on average{cut})" in report


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PERSALIGN_CACHE", str(tmp_path_factory.mktemp("cache")))
        yield run(tiny_config("seeds=[0]"), tmp_path_factory.mktemp("done") / "run", **QUIET).root


def copy_of(finished_run, tmp_path):
    return shutil.copytree(finished_run, tmp_path / "copy")


def test_report_on_missing_or_wrong_directories(tmp_path, capsys, finished_run):
    missing = tmp_path / "nope"
    assert cli_error(capsys, ["report", str(missing)]) == f"persalign: error: {missing}: no such run directory"
    config_file = finished_run / "config.yaml"
    assert cli_error(capsys, ["report", str(config_file)]).startswith(
        f"persalign: error: {config_file}: not a run directory (no config.yaml")
    root = copy_of(finished_run, tmp_path)
    (root / "config.yaml").write_bytes(b"data: [unclosed\n")
    assert cli_error(capsys, ["report", str(root)]).startswith(f"persalign: error: {root / 'config.yaml'}: damaged (")
    (root / "config.yaml").unlink()
    assert "not a run directory" in cli_error(capsys, ["report", str(root)])
    study = tmp_path / "study"  # `make demo` writes a study: STUDY/demo is the run
    copy_of(finished_run, study)
    assert cli_error(capsys, ["report", str(study)]) == \
        f"persalign: error: {study}: a study directory; report one of its runs: {study / 'copy'}"


@pytest.mark.parametrize("damage", ["empty_metrics", "truncated_metrics", "non_utf8_rows", "cut_rows_json",
                                    "missing_rows", "fewer_rows"])
def test_a_damaged_cell_is_named_and_skipped_while_the_others_report(tmp_path, capsys, finished_run, damage):
    root = copy_of(finished_run, tmp_path)
    cell = sorted(root.glob("cells/*/*/seed-0"))[0]
    metrics, rows = cell / "metrics.json", cell / "rows.jsonl"
    if damage == "empty_metrics":
        metrics.write_bytes(b"")
    elif damage == "truncated_metrics":
        metrics.write_bytes(metrics.read_bytes()[:40])
    elif damage == "non_utf8_rows":
        rows.write_bytes(b"\xff\xfe not text\n" + rows.read_bytes())
    elif damage == "cut_rows_json":
        rows.write_bytes(rows.read_bytes()[:30] + b"\n")
    elif damage == "fewer_rows":  # issue #29 (c): whole lines cut; the report used to move without a word
        rows.write_bytes(b"".join(rows.read_bytes().splitlines(keepends=True)[:3]))
    else:
        rows.unlink()
    code = cli.main(["report", str(root)])
    out, err = capsys.readouterr()
    assert code == 1
    assert err.strip().splitlines() == [f"persalign: damaged cell {cell.relative_to(root)}: skipped " +
                                        err.split(": skipped ", 1)[1].strip()]
    assert "## Damaged cells" in out and str(cell.relative_to(root)) in out
    others = [c for c in root.glob("cells/*/*/seed-0") if c != cell]
    assert all(f"| {json.loads((c / 'metrics.json').read_text())['decoder']} |" in out for c in others)


def test_resume_survives_a_write_torn_inside_a_multibyte_character(tmp_path, cache_dir):
    reference = run(tiny_config("seeds=[0]"), tmp_path / "reference", **QUIET)
    victim = run(tiny_config("seeds=[0]"), tmp_path / "victim", **QUIET)
    cell = sorted(victim.root.glob("cells/*/*/seed-0"))[0]
    (cell / "metrics.json").unlink()  # as if killed before the cell finished
    torn = '{"id": "x", "batch": 99, "generation": "caf\u00e9'.encode("utf-8")[:-1]  # half of "é"
    with (cell / "rows.jsonl").open("ab") as handle:
        handle.write(torn)
    resumed = run(tiny_config("seeds=[0]"), tmp_path / "victim", **QUIET)
    assert metrics_without_timing(resumed) == metrics_without_timing(reference)
    assert (cell / "rows.jsonl").read_bytes().endswith(b"\n")


def test_a_second_run_on_a_locked_directory_is_refused_in_one_line(tmp_path, capsys, cache_dir):
    target = tmp_path / "run"
    with locked(target):
        line = cli_error(capsys, ["run", "demo-baselines", "-o", str(target)] + TINY)
    assert line.startswith(f"persalign: error: {target} is in use by pid {os.getpid()} on host ")
    with pytest.raises(RunLockedError):
        with locked(target):
            with locked(target):
                pass


def test_two_processes_one_directory_one_refused_the_other_exact(tmp_path, cache_dir):
    """A real second process runs; the in-process run on the same folder is refused; its results are exact."""
    target = tmp_path / "shared"
    child = subprocess.Popen([sys.executable, "-m", "persalign.cli", "run", "demo-baselines", "-o", str(target)] + TINY
                             + ["seeds=[0]"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                             env={**os.environ, "PERSALIGN_CACHE": str(cache_dir)})
    deadline = time.time() + 120
    while time.time() < deadline and not ((target / ".lock").exists() and (target / ".lock").read_text()):
        time.sleep(0.05)
    with pytest.raises(RunLockedError, match=f"in use by pid {child.pid}"):
        run(tiny_config("seeds=[0]"), target, **QUIET)
    assert child.wait(timeout=300) == 0, child.stderr.read()
    reference = run(tiny_config("seeds=[0]"), tmp_path / "alone", **QUIET)
    from persalign.runner.store import RunStore

    assert metrics_without_timing(RunStore(target)) == metrics_without_timing(reference)


def test_a_lock_left_by_a_killed_process_is_taken_over_with_a_message(tmp_path, cache_dir):
    target = tmp_path / "run"
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time; from persalign.runner.lock import locked\n"
                               f"with locked({str(target)!r}):\n    print('held', flush=True); time.sleep(60)"],
                              stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "held"
    holder.send_signal(signal.SIGKILL)
    holder.wait()
    messages = []
    run(tiny_config("seeds=[0]", "decoders=[{name: zero_shot}]"), target, log=messages.append)
    assert any(f"taking over the lock of {target} left by pid {holder.pid}" in m for m in messages)


RATES = ("policy_accuracy", "policy_ties", "rm_accuracy", "rm_ties", "win_rate", "win_ties")


@pytest.mark.parametrize("lam", [0.0, 1.0])
def test_every_reported_rate_is_identical_at_batch_sizes_1_4_and_16(tmp_path, cache_dir, lam):
    """Float sums differ with the padding of a batch; ties are decided with a tolerance, so rates do not.
    At λ = 0 ARGS writes the zero-shot output, so every win-rate pair is a tie of two identical texts
    scored at different positions of a batch."""
    rates = {}
    for batch in (1, 4, 16):
        config = tiny_config("seeds=[0]", "decoders=[{name: zero_shot}]", f"generation.batch_size={batch}",
                             "methods=[{name: global_rm}]", "reward.epochs=1", "args.selection=fixed",
                             f"args.fixed_lambda={lam}")
        store = run(config, tmp_path / f"b{batch}", **QUIET)
        rates[batch] = {(m["decoder"], k): m[k] for m in store.all_metrics() for k in RATES if k in m}
    assert len(rates[1]) >= 6
    assert rates[1] == rates[4] == rates[16]
    if lam == 0.0:
        assert rates[1][("Global RM", "win_ties")] == 100.0


def test_tie_rule_absorbs_the_measured_batch_drift():
    """SmolLM2's Σ log π moved by up to 1.5e-5 between batch sizes 1 and 16 (next test); exact equality
    turned such a pair from a tie into a win. Within the relative tolerance it stays a tie."""
    from persalign.metrics.ranking import pair_outcome, ranking_accuracy

    at_batch_4 = pair_outcome(-23.456789, -23.456789)
    at_batch_1 = pair_outcome(-23.456789 + 1.5e-5, -23.456789)
    assert at_batch_4 == at_batch_1 == {"correct": 0.0, "tie": 1.0}
    assert pair_outcome(0.31, 0.3) == {"correct": 1.0, "tie": 0.0}  # real differences still count
    assert ranking_accuracy([1.0 + 1e-6, 2.0], [1.0, 1.0]) == {"accuracy": 50.0, "ties": 50.0, "n": 2}


@pytest.mark.needs_models
def test_real_model_scores_drift_with_batch_size_but_outcomes_do_not():
    import numpy as np

    from persalign.data.demo_authors import demo_records
    from persalign.metrics.ranking import outcomes
    from persalign.models.loading import load_causal_lm
    from persalign.prompts import PromptFormatter
    from persalign.rewards.policy_scoring import logprob_sums

    lm = load_causal_lm("smollm2-135m-instruct")
    formatter = PromptFormatter(lm.tokenizer, "headline")
    records = demo_records()[:12]
    prompts = [formatter.prompt_ids(r["input"]) for r in records]
    responses = [formatter.response_ids(r["output"]) for r in records]
    scores = {b: logprob_sums(lm, prompts, responses, b) for b in (1, 4, 16)}
    reference = scores[4]  # the same texts scored at another batch size: must tie with themselves
    for batch in (1, 16):
        correct, tie = outcomes(scores[batch], reference)
        assert tie.all() and not correct.any()
    assert np.abs(scores[1] - scores[16]).max() < 1e-3


# --- loaders: every malformed record is one line naming the file, the record and the problem -----------------
def jsonl_bytes(records) -> bytes:
    return b"".join(json.dumps(r, ensure_ascii=False).encode("utf-8") + b"\n" for r in records)


def completion(i, **extra):
    return {"user": f"u{i % 2}", "input": f"article {i}", "output": f"headline {i}", **extra}


def prism_folder(tmp_path, mutate):
    from tests.schema_records import prism_conversations, prism_survey

    folder = tmp_path / "prism"
    folder.mkdir()
    conversations = prism_conversations()
    mutate(conversations[0]["conversation_history"])
    (folder / "conversations.jsonl").write_bytes(jsonl_bytes(conversations))
    (folder / "survey.jsonl").write_bytes(jsonl_bytes(prism_survey()))
    return folder, folder / "conversations.jsonl"


def _two_chosen(history):
    history[2]["if_chosen"] = True


def _empty_chosen(history):
    history[1]["content"] = ""


def _utterance_not_object(history):
    history[1] = "just a string"


def _turn_not_int(history):
    history[1]["turn"] = "first"


LOADER_CASES = {
    "non_utf8": ("completions_jsonl", jsonl_bytes([completion(0)]) + b'{"user": "\xff"}\n',
                 "record line 2: not UTF-8 text (byte 0xff at byte offset 71 of the file)"),
    "date_not_string": ("completions_jsonl", jsonl_bytes([completion(0, date=20240101)]),
                        "record line 1: field 'date' must be a string, got int"),
    "id_is_a_list": ("completions_jsonl", jsonl_bytes([completion(0, id=["a", "b"])]),
                     "record line 1: field 'id' must be a string or an integer, got list"),
    "authors_is_a_list": ("news_category", jsonl_bytes([{"authors": ["A", "B"], "headline": "h",
                                                         "short_description": "d"}]),
                          "record line 1: field 'authors' must be a string, got list"),
    "rewardbench_duplicate_id": ("personalized_rewardbench", jsonl_bytes(
        [{"id": "x", "question": f"q{i}", "chosen": "a", "rejected": "b", "profile": [{"id": "p", "text": "t"}]}
         for i in range(2)]), "record line 2: duplicate id 'x' (first at line 1)"),
    "tldr_duplicate_comparison": ("tldr", None, "record line 2: duplicate comparison 'worker w1, post t3_0, summaries"),
    "lamp_duplicate_question": ("lamp", None, "record question 1: duplicate question id '100' (first at question 0)"),
}


@pytest.mark.parametrize("case", sorted(LOADER_CASES))
def test_loader_errors_name_file_record_and_problem(tmp_path, capsys, fixtures, case):
    dataset, content, message = LOADER_CASES[case]
    if dataset == "tldr":
        from tests.schema_records import tldr_comparisons

        first = tldr_comparisons()[0]
        content = jsonl_bytes([first, first])
    path = tmp_path / "data.jsonl"
    if dataset == "lamp":
        questions = json.loads((fixtures / "lamp5_dev_questions.json").read_text())
        questions[1]["id"] = questions[0]["id"] = "100"
        path = tmp_path / "dev_questions.json"
        path.write_text(json.dumps(questions))
        shutil.copy(fixtures / "lamp5_dev_outputs.json", tmp_path / "dev_outputs.json")
    else:
        path.write_bytes(content)
    line = cli_error(capsys, ["data", "summary", "demo-baselines", f"data.dataset={dataset}", f"data.path={path}",
                              "data.max_items_per_user=5", "data.embedder=hashing-bow"])
    assert line.startswith(f"persalign: error: {path}, {message}"), line


@pytest.mark.parametrize("mutate, message", [
    (_two_chosen, "turn 0 marks 2 responses as chosen (if_chosen); one at most"),
    (_empty_chosen, "turn 0: the chosen response is empty"),
    (_utterance_not_object, "an utterance must be an object, got str"),
    (_turn_not_int, "field 'turn' must be an integer, got 'first'"),
])
def test_prism_turns_of_the_wrong_shape_are_named(tmp_path, capsys, mutate, message):
    folder, conversations = prism_folder(tmp_path, mutate)
    line = cli_error(capsys, ["data", "summary", "demo-baselines", "data.dataset=prism", f"data.path={folder}"])
    assert line.startswith(f"persalign: error: {conversations}, record line 1") and line.endswith(message), line


def test_identical_chosen_and_rejected_are_dropped_and_reported(tmp_path, capsys):
    records = [{"user": f"u{i % 4}", "prompt": f"p{i}", "chosen": f"c{i}", "rejected": f"r{i}"} for i in range(24)]
    records[3]["rejected"] = records[3]["chosen"]
    path = tmp_path / "pairs.jsonl"
    path.write_bytes(jsonl_bytes(records))
    assert cli.main(["data", "summary", "demo-baselines", "data.dataset=preferences_jsonl", f"data.path={path}"]) == 0
    assert "pairs_with_chosen_equal_to_rejected_dropped=1" in capsys.readouterr().out


def test_a_resume_whose_data_file_changed_is_refused_naming_the_file(tmp_path, capsys, cache_dir):
    """Issue #29 (b): editing the data file and re-running resumed the old cells and their old references."""
    data = tmp_path / "writing.jsonl"
    data.write_bytes(jsonl_bytes([{"user": f"u{i % 4}", "input": f"article {i} about topic {i % 7}",
                                   "output": f"headline {i}"} for i in range(48)]))
    argv = ["run", "demo-baselines", "-o", str(tmp_path / "run"), "policies=[tiny-llama]", "data.embedder=hashing-bow",
            "metrics.names=[rouge]", "seeds=[0]", "generation.max_new_tokens=2", "decoders=[{name: zero_shot}]",
            "data.dataset=completions_jsonl", f"data.path={data}", "data.min_items_per_user=5",
            "split.adapt_fraction=0.5"]
    assert cli.main(argv) == 0
    assert cli.main(argv) == 0  # the same data: resumed (nothing to do)
    data.write_bytes(data.read_bytes().replace(b"headline 3", b"headline three"))
    capsys.readouterr()  # the two runs' progress bars
    line = cli_error(capsys, argv)
    assert f"input file {data.resolve()} has changed since its cells were computed" in line
    data.unlink()
    assert "is gone since its cells were computed" in cli_error(capsys, argv)


def test_a_cell_with_fewer_rows_than_its_metrics_say_is_recomputed_on_resume(tmp_path, finished_run):
    """Issue #29 (c): a finished cell whose rows.jsonl lost lines counts as unfinished, never as complete."""
    from persalign.runner.store import Cell, RunStore

    root = copy_of(finished_run, tmp_path)
    store = RunStore(root)
    (metrics,) = [m for m in store.all_metrics() if m["decoder_name"] == "zero_shot"]
    cell = Cell(metrics["policy"], metrics["decoder"], metrics["seed"])
    rows = store.cell_dir(cell) / "rows.jsonl"
    before = rows.read_bytes()
    rows.write_bytes(b"".join(before.splitlines(keepends=True)[:3]))
    assert not store.is_complete(cell)
    run(tiny_config("seeds=[0]"), root, **QUIET)
    assert len(store.read_rows(cell)) == metrics["examples"] and store.is_complete(cell)


def test_a_config_that_plans_no_cells_is_refused_before_the_run_dir_is_made(tmp_path, capsys):
    """Issue #29: `decoders: []` ran 0 cells and exited 0."""
    out = tmp_path / "run"
    line = cli_error(capsys, ["run", "demo-baselines", "-o", str(out), "policies=[tiny-llama]", "decoders=[]"])
    assert line.startswith("persalign: error: config: the run plans no cells") and not out.exists()


@pytest.mark.parametrize("content, message", [
    (b"name: a\nseeds: [0]\nname: b\n", "key 'name' is given twice"),
    (b"name: caf\xe9\n", "not UTF-8 text (byte 9)"),
    (b"name: ../elsewhere\n", "name: '../elsewhere' is not allowed (must be a name without path separators"),
])
def test_config_files_with_duplicate_keys_bad_bytes_or_a_path_as_name_are_refused(tmp_path, capsys, content, message):
    """Issue #29: duplicate keys were accepted (the last won), a non-UTF-8 file ended in a traceback and
    `name: ../x` moved the default run directory out of runs/."""
    config = tmp_path / "bad.yaml"
    config.write_bytes(content)
    assert message in cli_error(capsys, ["run", str(config), "-o", str(tmp_path / "run")])


def test_a_directory_given_as_the_config_is_named(tmp_path, capsys):
    assert cli_error(capsys, ["run", str(tmp_path)]) == (f"persalign: error: {tmp_path}: a directory, not a config "
                                                         "file (give a YAML file or a built-in config name)")


def test_a_method_label_of_dots_keeps_its_model_inside_models(tmp_path):
    from persalign.runner.store import RunStore
    from persalign.runner.trained import model_dir

    store = RunStore(tmp_path / "run")
    assert store.root / "models" in model_dir(store, "..", 0).resolve().parents


def error_after_progress(capsys, argv) -> str:
    """Like cli_error for a failure after work began: progress bars may precede the one persalign line."""
    code = cli.main(argv)
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("persalign:")]
    assert code != 0 and len(lines) == 1, lines
    return lines[0]


def test_disk_full_mid_run_is_one_line_and_loses_nothing_stored(tmp_path, capsys, finished_run, monkeypatch):
    """Issue #29 (3): an OS error mid-run was a traceback. Injected: the disk fills while a cell's third
    batch is appended; the run stops with one line, and a resume gives the uninterrupted run's numbers."""
    import errno

    from persalign.runner.store import RunStore

    calls, real_append = [], RunStore.append

    def append_until_full(self, cell, name, records):
        calls.append(name)
        if len(calls) == 5:
            raise OSError(errno.ENOSPC, "No space left on device", str(self.cell_dir(cell) / name))
        return real_append(self, cell, name, records)

    monkeypatch.setattr(RunStore, "append", append_until_full)
    monkeypatch.setenv("PERSALIGN_CACHE", str(tmp_path / "cache"))
    out = tmp_path / "run"
    line = error_after_progress(capsys, ["run", "demo-baselines", "-o", str(out), "seeds=[0]"] + TINY[:-1])
    assert line.startswith("persalign: error: ") and "rows.jsonl: No space left on device; nothing already " \
        "stored was lost" in line, line
    kept = sorted(p.name for p in out.glob("cells/*/*/*/rows.jsonl"))
    assert kept  # the batches written before the disk filled are still there
    monkeypatch.setattr(RunStore, "append", real_append)
    assert cli.main(["run", "demo-baselines", "-o", str(out), "seeds=[0]"] + TINY[:-1]) == 0
    assert metrics_without_timing(RunStore(out)) == metrics_without_timing(RunStore(finished_run))


@pytest.mark.parametrize("where", ["/proc/persalign-run", "/dev/null/run"])
def test_a_run_dir_the_system_refuses_is_one_line(tmp_path, capsys, where):
    line = cli_error(capsys, ["run", "demo-baselines", "-o", where] + TINY)
    assert line.startswith(f"persalign: error: {where}") and line.count(":") >= 2, line


@pytest.mark.parametrize("name", [".lock", "config.yaml"])
def test_a_directory_where_a_run_file_belongs_is_named(tmp_path, capsys, finished_run, name):
    root = copy_of(finished_run, tmp_path)
    (root / name).unlink()
    (root / name).mkdir()
    line = cli_error(capsys, ["run", "demo-baselines", "-o", str(root), "seeds=[0]"] + TINY[:-1])
    assert line.startswith(f"persalign: error: {root / name}"), line


@pytest.mark.parametrize("key, value", [("rouge1", "high"), ("seed", "0"), ("examples", 2.5),
                                        ("stage_seconds", {"generation_s": "slow"}), ("policy_accuracy", True)])
def test_metrics_of_the_wrong_type_are_named_skipped_and_recomputed(tmp_path, capsys, finished_run, key, value):
    """Issue #29: metrics.json with values of the wrong type ended in a traceback in the report."""
    from persalign.runner.store import RunStore

    root = copy_of(finished_run, tmp_path)
    path = next(root.glob("cells/*/Zero-Shot/seed-0/metrics.json"))
    path.write_text(json.dumps({**json.loads(path.read_text()), key: value}))
    assert cli.main(["report", str(root)]) == 1
    err = capsys.readouterr().err
    assert f"damaged cell {path.parent.relative_to(root)}: skipped" in err and repr(key) in err, err
    run(tiny_config("seeds=[0]"), root, **QUIET)
    assert metrics_without_timing(RunStore(root)) == metrics_without_timing(RunStore(finished_run))
