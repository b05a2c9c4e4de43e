"""Pinned numbers: every deployment kind, the tiny study and the demos give the values stored in tests/golden/.

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
from tests.golden import assert_same, hostile_checkout, load_golden, run_demo, run_tiny, run_tiny_study


def test_every_deployment_gives_the_pinned_numbers(tmp_path, cache_dir):
    expected, same_machine = load_golden("tiny")
    assert_same(expected, json.loads(json.dumps(run_tiny(tmp_path / "run"))), same_machine=same_machine)


def test_the_tiny_end_to_end_study_gives_the_pinned_numbers(tmp_path, cache_dir):
    expected, same_machine = load_golden("study")
    assert_same(expected, json.loads(json.dumps(run_tiny_study(tmp_path / "study"))), same_machine=same_machine)


@pytest.mark.needs_models
def test_the_baselines_demo_gives_the_pinned_numbers(tmp_path):
    """`persalign run demo-baselines seeds=[0]` (SmolLM2-135M, real model, the reward-free baselines)."""
    expected, same_machine = load_golden("demo")
    assert_same(expected, json.loads(json.dumps(run_demo(tmp_path / "run"))), same_machine=same_machine)


@pytest.mark.needs_models
def test_the_whole_chain_demo_gives_the_pinned_numbers_from_any_folder_and_thread_count(tmp_path):
    """`make demo` (`persalign study demo`): every cell, the printed verdict and findings, the verdict table —
    the README's numbers — run from a checkout, cache and run folder under a path with a space, a non-ASCII
    letter and "t5" in it (issue #51), and with OMP_NUM_THREADS=4 (persalign computes with its own count)."""
    expected, same_machine = load_golden("demo-study")
    base, env = hostile_checkout(tmp_path)
    converted = Path(resolve_model_path("smollm2-135m-instruct"))  # converted once per cache: reuse it (linked)
    (base / "cache" / "models").mkdir(parents=True)
    (base / "cache" / "models" / converted.name).symlink_to(converted)
    out = base / "values.json"
    done = subprocess.run([sys.executable, "-m", "tests.golden", "demo-study", str(out)], cwd=base,
                          env={**env, "OMP_NUM_THREADS": "4"}, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "LOAD REPORT" not in done.stdout + done.stderr  # no library load report on the terminal
    assert_same(expected, json.loads(out.read_text()), same_machine=same_machine)
