"""Pinned numbers: every deployment kind, the tiny study and the demos give the values stored in tests/golden/.

The values were first stored at db18ad0, before the runner was rebuilt (issue #16),
and re-stored once on 2026-11-24 (tests/golden.py says why and what moved); each
file names the machine it was stored on, since trained heads and ARGS near-ties
amplify the CPU kernels' float rounding.
"""

import json

import pytest

from tests.golden import assert_same, load_golden, run_demo, run_demo_study, run_tiny, run_tiny_study


def test_every_deployment_gives_the_pinned_numbers(tmp_path, cache_dir):
    expected = load_golden("tiny")
    assert_same(expected, json.loads(json.dumps(run_tiny(tmp_path / "run"))))


def test_the_tiny_end_to_end_study_gives_the_pinned_numbers(tmp_path, cache_dir):
    expected = load_golden("study")
    assert_same(expected, json.loads(json.dumps(run_tiny_study(tmp_path / "study"))))


@pytest.mark.needs_models
def test_the_baselines_demo_gives_the_pinned_numbers(tmp_path):
    """`persalign run demo-baselines` (SmolLM2-135M, real model, 3 seeds of the reward-free baselines)."""
    expected = load_golden("demo")
    assert_same(expected, json.loads(json.dumps(run_demo(tmp_path / "run"))))


@pytest.mark.needs_models
def test_the_whole_chain_demo_gives_the_pinned_numbers_sentences_and_verdict_table(tmp_path):
    """`make demo` (`persalign study demo`): every cell, the printed verdict and findings, the verdict table."""
    expected = load_golden("demo-study")
    assert_same(expected, json.loads(json.dumps(run_demo_study(tmp_path / "study"))))
