"""The bad-input suite: every case is one clear line and a non-zero exit, and nothing already computed is lost.

Grows with the code: one test (or parameter) per case found by the hostile-input probe (issue #15).
"""

import json
import shutil

import pytest

from persalign import cli
from persalign.runner.run import run
from tests.bad_input_helpers import QUIET, cli_error, jsonl_bytes
from tests.test_runner import TINY, metrics_without_timing, tiny_config


@pytest.mark.parametrize("override, message", [
    ("generation.batch_size=0", "generation.batch_size: 0 is not allowed (must be a number >= 1)"),
    ("generation.max_new_tokens=-1", "generation.max_new_tokens: -1 is not allowed (must be a number >= 1)"),
    ("args.top_k=0", "args.top_k: 0 is not allowed (must be a number >= 1)"),
    ("args.lambdas=[]", "args.lambdas: [] is not allowed (must be a non-empty list of distinct finite numbers >= 0)"),
    ("best_of_n.ns=[]", "best_of_n.ns: [] is not allowed (must be a non-empty list of integers >= 1)"),
    ("args.selection=bogus", "args.selection: 'bogus' is not allowed (must be one of ['auto', 'policy_accuracy', "
                             "'harmonic', 'fixed'])"),
    ("decoders=[{name: icl, shots: -2}]", "decoders[0].shots: -2 is not allowed (must be a number >= 0)"),
    ("seeds=[]", "seeds: [] is not allowed (must be a non-empty list of distinct integers from 0 to 2**32 - 1)"),
    ("seeds=[-1]", "seeds: [-1] is not allowed (must be a non-empty list of distinct integers from 0 to 2**32 - 1)"),
    ("seeds=[0,0]", "seeds: [0, 0] is not allowed (must be a non-empty list of distinct integers from 0 to 2**32 - 1)"),
    ("data.seed=-3", "data.seed: -3 is not allowed (must be an integer from 0 to 2**32 - 1)"),
    ("split.seed=-1", "split.seed: -1 is not allowed (must be an integer from 0 to 2**32 - 1)"),
    # issue #56: 2**64 ran every cell, then the report crashed (OverflowError), no report, exit 1 (41e66f0)
    ("seeds=[18446744073709551616]", "seeds: [18446744073709551616] is not allowed (must be a non-empty list of "
                                     "distinct integers from 0 to 2**32 - 1)"),
    ("args.lambdas=[0, .inf]", "args.lambdas: [0.0, inf] is not allowed (must be a non-empty list of distinct finite "
                               "numbers >= 0)"),
    ("args.fixed_lambda=-1", "args.fixed_lambda: -1.0 is not allowed (must be a finite number >= 0)"),
    ("reward.lora_rank=0", "reward.lora_rank: 0 is not allowed (must be a number >= 1)"),
    ("methods=[{name: lore, head_lr: -0.001}]", "methods[0].head_lr: -0.001 is not allowed (must be a "
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


def test_a_resume_whose_data_file_changed_is_refused_naming_the_file(tmp_path, capsys, cache_dir):
    """Issue #29 (b): editing the data file and re-running resumed the old cells and their old references."""
    data = tmp_path / "writing.jsonl"
    data.write_bytes(jsonl_bytes([{"user": f"u{i % 4}", "input": f"article {i} about topic {i % 7}",
                                   "output": f"headline {i}"} for i in range(48)]))
    argv = ["run", "demo-baselines", "-o", str(tmp_path / "run"), "policies=[tiny-llama]", "data.embedder=hashing-bow",
            "metrics.names=[rouge]", "seeds=[0]", "generation.max_new_tokens=2", "decoders=[{name: zero_shot}]",
            "data.dataset=completions_jsonl", "data.task=headline", f"data.path={data}", "data.min_items_per_user=5",
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
