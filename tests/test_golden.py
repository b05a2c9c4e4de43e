"""Pinned numbers: every deployment kind, the tiny study and the whole chain give the values stored in tests/golden/.

The values were first stored at db18ad0, before the runner was rebuilt (issue #16),
and re-stored since (tests/golden.py says when, why and what moved); each file names
the numerics it was stored with (torch, kernels, MKL's branch, threads): wherever they are
the same — any CPU that runs persalign's pinned kernels — raw float32 internals are compared
too, elsewhere every reported number and generation (trained heads and ARGS near-ties
amplify the last digits of other matrix-product kernels). Never skipped for the CPU.
"""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from persalign.models.loading import resolve_model_path
from tests.golden import (SMALL_CHAIN, assert_same, compare, hostile_checkout, load_golden, run_tiny, run_tiny_study,
                          study_view, tiny_study_run)


def test_every_deployment_gives_the_pinned_numbers(tmp_path, cache_dir):
    expected, same_machine = load_golden("tiny")
    assert_same(expected, json.loads(json.dumps(run_tiny(tmp_path / "run"))), same_machine=same_machine)


def test_the_tiny_end_to_end_study_gives_the_pinned_numbers(tmp_path, cache_dir):
    expected, same_machine = load_golden("study")
    assert_same(expected, json.loads(json.dumps(run_tiny_study(tmp_path / "study"))), same_machine=same_machine)


@pytest.mark.slow
@pytest.mark.needs_models
def test_the_whole_chain_gives_the_pinned_numbers_from_any_folder_and_thread_count(tmp_path):
    """`persalign study demo` at the small size of tests/golden.py's SMALL_CHAIN (SmolLM2, BERTScore, both reward
    methods' λ choice, ARGS, Best-of-N, the analyses and the verdict table), run by the command from a checkout,
    cache and run folder under a path with a space, a non-ASCII letter and "t5" in it (issue #51), with
    OMP_NUM_THREADS=4 (persalign computes with its own count), and compared as `make demo` compares its run."""
    base, env = hostile_checkout(tmp_path)
    converted = Path(resolve_model_path("smollm2-135m-instruct"))  # converted once per cache: reuse it (linked)
    (base / "cache" / "models").mkdir(parents=True)
    (base / "cache" / "models" / converted.name).symlink_to(converted)
    env = {**env, "OMP_NUM_THREADS": "4"}
    done = subprocess.run([sys.executable, "-m", "persalign.cli.commands", "study", "demo", *SMALL_CHAIN, "--quiet",
                           "-o", str(base / "runs")], cwd=base, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "LOAD REPORT" not in done.stdout + done.stderr  # no library load report on the terminal
    expected, same_machine = load_golden("chain")
    assert_same(expected, json.loads(json.dumps(study_view(base / "runs" / "demo"))), same_machine=same_machine)
    compared = subprocess.run([sys.executable, "-m", "tests.golden", "compare", "chain", str(base / "runs" / "demo")],
                              cwd=base, env=env, capture_output=True, text=True, timeout=300)
    assert compared.returncode == 0 and "reproduced here" in compared.stdout, compared.stdout + compared.stderr


def test_a_run_that_differs_from_the_stored_numbers_is_named_with_its_first_difference(tmp_path, cache_dir, capsys):
    """`make demo` compares its run with README's numbers (`python -m tests.golden compare`); on the tiny study:
    the same run reads as reproduced, one generation changed reads as not, naming the cell and row."""
    run_dir = tiny_study_run(tmp_path / "study")
    assert compare("study", str(run_dir)) == 0
    rows = next(run_dir.glob("cells/*/Zero-Shot/seed-0/rows.jsonl"))
    first, *rest = rows.read_text().splitlines()
    rows.write_text("\n".join([json.dumps({**json.loads(first), "generation": "not what it wrote"}), *rest]) + "\n")
    capsys.readouterr()
    assert compare("study", str(run_dir)) == 1
    said = capsys.readouterr().out
    assert "NOT the numbers stored in tests/golden/study.json" in said and "Zero-Shot" in said, said
    assert "/generation" in said and "not what it wrote" in said, said


def test_where_mkl_runs_its_own_path_another_cpu_is_another_machine():
    """On an AMD EPYC (MKL branch AUTO: MKL picks its code path by CPU) a Zen 5 computed the chain's BERTScore
    means 1e-7 apart from the EPYC chain.json was stored on, with the same numerics record: the golden's machine
    names the CPU there, so such a CPU is compared by what is reported, not bit for bit (issue #74)."""
    from tests.golden import machine_of

    auto = {"torch": "2.13.0+cpu", "kernels": "AVX2", "mkl": "AUTO", "threads": 1}
    pinned = {**auto, "mkl": "AVX2"}
    assert machine_of(auto, "AuthenticAMD family 26 model 2") != machine_of(auto, "AuthenticAMD family 25 model 1")
    assert machine_of(pinned, "GenuineIntel family 6 model 143") == machine_of(pinned, "GenuineIntel family 6 model 106")
