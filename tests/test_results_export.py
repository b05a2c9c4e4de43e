"""results.json and `persalign export` (issue #30, point 4): versioned, complete, readable by pandas."""

import json
from pathlib import Path

import pandas as pd
import pytest

from persalign import cli
from persalign.report.results import SCHEMA, SCHEMA_VERSION
from tests.test_runner import TINY

pytestmark = pytest.mark.xdist_group("results_export")  # one worker: the module's run is made once, not once per worker


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("export") / "run"
    argv = ["run", "demo-baselines", "-o", str(run_dir), "seeds=[0]", "methods=[{name: pal, prototypes: 3}]",
            "reward.epochs=2", "args.selection=fixed"] + [a for a in TINY if not a.startswith("seeds")]
    assert cli.main(argv) == 0
    return run_dir


def test_results_json_is_written_with_every_cell_its_ci_settings_costs_and_provenance(finished):
    results = json.loads((finished / "results.json").read_text())
    assert results["schema"] == SCHEMA and results["schema_version"] == SCHEMA_VERSION
    assert results["run"]["config"]["methods"] == [{"name": "pal", "label": None, "prototypes": 3}]
    assert results["run"]["provenance"]["runs"][0]["seeds"] == [0]
    cells = {c["decoder"]: c for c in results["cells"]}
    assert set(cells) == {"Zero-Shot", "ICL (4-shot)", "ICL-RAG (4-shot)", "PAL"}
    assert cells["PAL"]["settings"]["training"]["settings"]["prototypes"] == 3
    assert cells["PAL"]["counted_work"] and cells["Zero-Shot"]["counted_work"]
    summary = {d["deployment"]: d for d in results["deployments"]}
    pal = summary["PAL"]["metrics"]["policy_accuracy"]
    assert pal["level"] == 0.95 and pal["users"] >= 2
    assert pal["low"] <= pal["mean"] <= pal["high"] if pal["users"] >= 8 else "needs 8" in pal["reason"]
    assert pal["mean"] == pytest.approx(cells["PAL"]["policy_accuracy"])  # one seed: the cell is the summary


def test_export_csv_is_one_tidy_row_per_cell_for_pandas(finished, tmp_path, capsys):
    """Issue #43 (5): before, the CSV began policy, decoder, seed, examples, had no method, λ, run, data set or
    interval column, and 55 columns mostly of cost internals."""
    out = tmp_path / "cells.csv"
    assert cli.main(["export", str(finished), "--format", "csv", "-o", str(out)]) == 0
    frame = pd.read_csv(out)
    assert len(frame) == 4
    assert list(frame.columns[:11]) == ["run", "dataset", "policy", "seed", "method", "deployment", "label",
                                        "lambda", "shots", "users", "examples"]
    assert set(frame["run"]) == {"run"} and set(frame["dataset"]) == {"demo"}
    pal = frame.set_index("label").filter(like="PAL", axis=0).iloc[0]
    cells = {c["decoder"]: c for c in json.loads((finished / "results.json").read_text())["cells"]}
    assert pal["method"] == "pal" and pal["deployment"] == "args"
    assert pal["lambda"] == pytest.approx(cells["PAL"]["settings"]["lambda"])
    assert pal["rouge1"] == pytest.approx(cells["PAL"]["rouge1"])
    assert {"rouge1_low", "rouge1_high", "policy_accuracy_low", "generation_flops_per_output"} <= set(frame.columns)
    assert set(frame.set_index("deployment").loc[["icl", "icl_rag"], "shots"]) == {4}
    assert not any("." in c for c in frame.columns) and len(frame.columns) < 35
    assert cli.main(["export", str(finished), "--format", "csv", "--costs", "-o", str(out)]) == 0
    costs = pd.read_csv(out)
    assert any(c.startswith("counted_work.") for c in costs.columns)
    assert any(c.startswith("stage_seconds.") for c in costs.columns)


def test_export_rows_is_every_generation_with_its_cell_and_prompt(finished, capsys):
    assert cli.main(["export", str(finished), "--format", "rows"]) == 0
    rows = pd.read_json(__import__("io").StringIO(capsys.readouterr().out), lines=True)
    assert set(rows["deployment"]) == {"Zero-Shot", "ICL (4-shot)", "ICL-RAG (4-shot)", "PAL"}
    assert rows["rendered_prompt"].notna().all() and rows["generation"].notna().all()
    assert len(rows) == 4 * json.loads((finished / "results.json").read_text())["cells"][0]["examples"]


def test_the_exported_interval_is_the_reports_over_the_cells_users():
    from persalign.analysis.intervals import PERCENT, mean_interval
    from persalign.report.tidy import _interval

    rows = [{"user": f"u{u}", "rouge1": 10.0 * u + q} for u in range(10) for q in range(2)]
    low, high = _interval(rows, "rouge1")
    expected = mean_interval([10.0 * u + 0.5 for u in range(10)], PERCENT)
    assert (low, high) == (pytest.approx(expected["low"]), pytest.approx(expected["high"])) and low < 45.5 < high
    assert _interval(rows[:6], "rouge1") == (None, None)  # 3 users: no interval, as in the reports


def test_export_json_to_stdout_is_the_results_document(finished, capsys):
    assert cli.main(["export", str(finished)]) == 0
    exported = json.loads(capsys.readouterr().out)
    assert exported["schema_version"] == SCHEMA_VERSION and len(exported["cells"]) == 4


def test_export_of_a_folder_that_is_not_a_run_is_one_line(tmp_path, capsys):
    assert cli.main(["export", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(tmp_path) in err[0]


def test_a_finished_run_is_logged_to_wandb_in_offline_mode(finished, tmp_path, monkeypatch, capsys):
    """--wandb-project logs the stored results (tables of deployments and cells) to W&B; offline here."""
    pytest.importorskip("wandb", reason="wandb is the optional extra persalign[wandb]; make install adds it")
    from persalign.report.wandb_log import log_run

    run_dir = tmp_path / "run"
    import shutil
    shutil.copytree(finished, run_dir)
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    folder = Path(log_run(run_dir, "persalign-test"))
    assert folder.parent == run_dir / "wandb" and folder.name.startswith("offline-run-")
    tables = {p.name.split("_")[0]: json.loads(p.read_text()) for p in folder.glob("files/media/table/*.table.json")}
    assert tables["deployments"]["columns"][:3] == ["policy", "deployment", "metric"]
    logged = {(r[1], r[2]): r[3] for r in tables["deployments"]["data"]}
    results = json.loads((finished / "results.json").read_text())
    pal = {d["deployment"]: d for d in results["deployments"]}["PAL"]["metrics"]["policy_accuracy"]["mean"]
    assert logged[("PAL", "policy_accuracy")] == pytest.approx(pal)
    assert len(tables["cells"]["data"]) == 4


def test_wandb_project_on_the_command_line_logs_after_the_run(finished, tmp_path, monkeypatch, capsys):
    pytest.importorskip("wandb", reason="wandb is the optional extra persalign[wandb]; make install adds it")
    import shutil
    shutil.copytree(finished, tmp_path / "run")
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    argv = ["run", "demo-baselines", "-o", str(tmp_path / "run"), "seeds=[0]", "methods=[{name: pal, prototypes: 3}]",
            "reward.epochs=2", "args.selection=fixed", "--wandb-project", "persalign-test"] + \
        [a for a in TINY if not a.startswith("seeds")]
    assert cli.main(argv) == 0  # every cell already complete: the run resumes to nothing, then logs
    assert "wandb: logged" in capsys.readouterr().out
    assert list((tmp_path / "run" / "wandb").glob("offline-run-*/files/media/table/deployments_*.table.json"))


def test_wandb_project_without_wandb_installed_is_one_line(finished, monkeypatch):
    import sys

    from persalign.core.errors import ConfigError
    from persalign.report.wandb_log import log_run

    monkeypatch.setitem(sys.modules, "wandb", None)  # import wandb now raises ImportError
    with pytest.raises(ConfigError, match=r"--wandb-project needs wandb: pip install wandb"):
        log_run(finished, "p")


def test_export_never_replaces_a_device_fifo_or_folder_it_is_pointed_at(finished, tmp_path, capsys):
    """Issue #56: `export -o /dev/full` (as root) renamed its temporary file over the device node, leaving a
    regular file; the same for /dev/null or a FIFO (here: a FIFO, so the test can't harm the machine). Before
    (41e66f0) the FIFO became a 77 kB regular file and the export said 'wrote'."""
    import os
    import stat

    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    for target, kind in ((fifo, "not a regular file"), (tmp_path, "a folder")):
        assert cli.main(["export", str(finished), "--format", "rows", "-o", str(target)]) == 2
        err = capsys.readouterr().err.strip()
        assert err == f"persalign: error: {target}: {kind}{' (a device, FIFO or socket)' if target == fifo else ''}; " \
                      "persalign writes only to regular files or new paths", err
    assert stat.S_ISFIFO(os.stat(fifo).st_mode) and not (tmp_path / "pipe.tmp").exists()


def test_export_of_a_run_with_no_finished_cell_is_one_line(finished, tmp_path, capsys):
    """Issue #56: `export --format csv` on a run whose cells all lack metrics.json was a KeyError (41e66f0)."""
    import shutil

    from tests.bad_input_helpers import cli_error

    copy = shutil.copytree(finished, tmp_path / "copy")
    for path in copy.glob("cells/*/*/seed-*/metrics.json"):
        path.unlink()
    for form in ("csv", "rows", "json"):
        assert cli_error(capsys, ["export", str(copy), "--format", form]) == \
            f"persalign: error: {copy}: no finished cell to export; run (or resume) it first"
