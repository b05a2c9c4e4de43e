"""The progress line's ETA from counted work (issue #43): a reward cell's feature pass and λ choice are
counted before it runs, so the baselines' speed no longer promises its time."""

import pytest

from persalign.models.checks import policy_config
from persalign.runner import eta
from persalign.runner.counted_plan import design_of, shape_from_config, stage_work
from persalign.runner.plan import plan
from tests.test_runner import tiny_config


def test_each_cells_counted_work_sums_to_the_plans_and_shared_work_falls_on_the_first_cell(cache_dir):
    config = tiny_config("seeds=[0, 1]", "decoders=[{name: zero_shot}]", "methods=[{name: global_rm}]")
    design = design_of(config)
    shape = shape_from_config(policy_config(config.policies[0], config.cache_dir))
    cells = plan(config)
    work, stages = eta.cells_work(config, design, shape, cells)
    assert sum(work) == pytest.approx(sum(stage_work(config, design, shape).values()))
    assert stages == stage_work(config, design, shape)
    by_name = {(p.cell.decoder, p.cell.seed): w for p, w in zip(cells, work)}
    zero, first, second = by_name[("Zero-Shot", 0)], by_name[("Global RM", 0)], by_name[("Global RM", 1)]
    assert first > second > zero  # the features and the query pairs' log-probs: once, on the first reward cell
    assert "features" in eta.work_line(stages) and "λ choice" in eta.work_line(stages)


def test_the_eta_is_the_work_left_at_the_rate_reached(monkeypatch):
    clock = iter([0.0, 10.0, 20.0])
    monkeypatch.setattr(eta.time, "perf_counter", lambda: next(clock))
    lines = []
    progress = eta.Progress(3, 0, lines.append, {"light": 1e9, "heavy": 18e9, "other": 1e9})
    progress.tick("light", "light")  # 1 GFLOP in 10 s: 0.1 GFLOP/s; 19 GFLOP left: 190 s
    assert "ETA 3.2 min: 0.019 TFLOP of counted work left at 0.1 GFLOP/s" in lines[-1]
    progress.tick("heavy", "heavy")  # a mean cell time would have said 2 × 10 s
    assert "ETA 0.0 min" in lines[-1] and "progress 2/3" in lines[-1]


def test_without_counted_work_the_eta_is_the_mean_cell_time(monkeypatch):
    clock = iter([0.0, 30.0])
    monkeypatch.setattr(eta.time, "perf_counter", lambda: next(clock))
    lines = []
    eta.Progress(3, 1, lines.append).tick("a cell on Ray")
    assert "progress 2/3" in lines[-1] and "ETA 0.5 min (mean cell time so far)" in lines[-1]


def test_the_lambda_choice_counts_decoding_only_where_its_rule_decodes(cache_dir):
    """Pair-only data (Personalized RewardBench) chooses λ by policy accuracy, no decoding: the plan counted
    39.7 TFLOP of validation decodes for a fixture run that never does them."""
    config = tiny_config("methods=[{name: global_rm}]")
    shape = shape_from_config(policy_config(config.policies[0], config.cache_dir))
    design = design_of(config)
    harmonic = stage_work(config, design, shape)["λ choice"]
    design.has_references = False
    pairs_only = stage_work(config, design, shape)["λ choice"]
    assert 0 < pairs_only < harmonic
    by_accuracy = tiny_config("methods=[{name: global_rm}]", "args.selection=policy_accuracy")
    assert stage_work(by_accuracy, design_of(by_accuracy), shape)["λ choice"] == pytest.approx(pairs_only)
