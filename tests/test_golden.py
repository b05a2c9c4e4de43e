"""The rebuilt runner gives the numbers the old one stored (issue #16): every deployment kind, row by row.

tests/golden/*.json were written by tests/golden.py at commit db18ad0, before
the runner was rebuilt; these tests re-run the same configs with today's code.
"""

import json

import pytest

from tests.golden import GOLDEN_DIR, assert_same, run_demo, run_tiny, run_tiny_study


def test_every_deployment_gives_the_numbers_stored_before_the_rebuild(tmp_path, cache_dir):
    expected = json.loads((GOLDEN_DIR / "tiny.json").read_text())
    assert_same(expected, json.loads(json.dumps(run_tiny(tmp_path / "run"))))


def test_the_tiny_end_to_end_study_gives_the_numbers_stored_before_the_rebuild(tmp_path, cache_dir):
    expected = json.loads((GOLDEN_DIR / "study.json").read_text())
    assert_same(expected, json.loads(json.dumps(run_tiny_study(tmp_path / "study"))))


@pytest.mark.needs_models
def test_the_demo_gives_the_numbers_stored_before_the_rebuild(tmp_path):
    """`make demo`'s run (SmolLM2-135M, real model) against the values stored before the rebuild."""
    expected = json.loads((GOLDEN_DIR / "demo.json").read_text())
    assert_same(expected, json.loads(json.dumps(run_demo(tmp_path / "run"))))
