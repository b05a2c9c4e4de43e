"""`benchmarks/compare_runs.py`, the check the docs use to prove "identical numbers", cannot pass on nothing
(issue #56): a missing, empty, foreign or damaged side is one line and exit 2; a real difference exit 1.

    pytest tests/test_compare_runs.py
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from persalign.runner.run import run
from tests.bad_input_helpers import QUIET
from tests.test_runner import tiny_config

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def stored(tmp_path_factory) -> Path:
    """A tiny run with a baseline and an ARGS cell (its lambda.json) to compare copies of."""
    folder = tmp_path_factory.mktemp("compare") / "run"
    config = tiny_config("seeds=[0]", "decoders=[{name: zero_shot}]", "methods=[{name: global_rm}]",
                         "reward.epochs=1", "args.lambdas=[0.0, 1.0]", "args.validation_size=2")
    run(config, folder, **QUIET)
    return folder


def compare(a: Path, b: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "benchmarks" / "compare_runs.py"), str(a), str(b)],
                          capture_output=True, text=True, timeout=300)


def first_file(run_dir: Path, name: str) -> Path:
    return sorted(run_dir.glob(f"cells/*/*/seed-*/{name}"))[0]


def damaged_copies(stored: Path, tmp_path: Path) -> dict:
    """case -> (side A, side B), B broken as the issue found it."""
    cases = {"missing folder": (stored, tmp_path / "nowhere"), "both missing": (tmp_path / "x", tmp_path / "y"),
             "empty folders": (tmp_path / "e1", tmp_path / "e2"), "a JSONL file": (stored, tmp_path / "rows.jsonl")}
    (tmp_path / "e1").mkdir()
    (tmp_path / "e2").mkdir()
    (tmp_path / "rows.jsonl").write_text('{"id": 1}\n')
    breakers = {"damaged metrics.json": lambda r: first_file(r, "metrics.json").write_bytes(b"\xff\xfe{"),
                "deleted rows.jsonl": lambda r: first_file(r, "rows.jsonl").unlink(),
                "lambda.json holding []": lambda r: first_file(r, "lambda.json").write_text("[]")}
    for case, breaker in breakers.items():
        copy = tmp_path / case.replace(" ", "_").replace("[]", "list")
        shutil.copytree(stored, copy)
        breaker(copy)
        cases[case] = (stored, copy)
    return cases


def test_a_side_that_cannot_be_compared_is_one_line_and_exit_2(stored, tmp_path):
    """Before (41e66f0): the first four printed "0 of 0 cells differ" and exit 0, the last three tracebacks."""
    for case, (a, b) in damaged_copies(stored, tmp_path).items():
        done = compare(a, b)
        assert done.returncode == 2, (case, done.stdout, done.stderr)
        assert "Traceback" not in done.stderr, case
        assert done.stderr.strip().startswith("compare_runs: cannot compare: "), (case, done.stderr)
        assert len(done.stderr.strip().splitlines()) == 1, case


def test_identical_copies_pass_and_say_how_many_cells_and_a_changed_generation_fails(stored, tmp_path):
    same = compare(stored, shutil.copytree(stored, tmp_path / "copy"))
    assert same.returncode == 0, same.stdout + same.stderr
    assert "2 cells in both" in same.stdout and "0 of 2 cells differ" in same.stdout
    changed = shutil.copytree(stored, tmp_path / "changed")
    rows_path = first_file(changed, "rows.jsonl")
    rows = [json.loads(line) for line in rows_path.read_text().splitlines()]
    rows[0]["generation"] += " changed"
    rows_path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert compare(stored, changed).returncode == 1
