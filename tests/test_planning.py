"""`persalign plan` (issue #39 point 3): the design as the run makes it, counted work that bounds what a run
meters, variance components recovered from rows, and proposals within a budget."""

import json
import re

import numpy as np
import pytest

from persalign.core.config import load_config
from persalign.models.checks import policy_config
from persalign.planner.plan import PlanOptions, design_of, plan_report, shape_from_config, stage_work
from persalign.planner.power import components_from_rows, detectable, propose
from persalign.runner.run import run
from tests.test_runner import TINY

TINY_ARGS = TINY + ["decoders=[{name: zero_shot}, {name: icl, shots: 2}]", "methods=[{name: global_rm}]",
                    "args.selection=fixed", "args.fixed_lambda=1.0", "reward.epochs=1"]


def test_the_plan_states_the_runs_design_and_bounds_its_metered_work(tmp_path, cache_dir):
    import sys
    sys.path.insert(0, "benchmarks")
    from bench_floor import metered_flops

    from persalign.models.checks import policy_config

    config = load_config("demo-baselines", TINY_ARGS)
    design = design_of(config)
    store = run(config, tmp_path / "run", log=lambda *_: None)
    cells = store.all_metrics()
    assert design.query_items == cells[0]["examples"] and len(design.queries) == cells[0]["users"]
    assert sum(design.cells.values()) == len(cells)
    planned = stage_work(config, design, shape_from_config(policy_config("tiny-llama", None)))
    planned["generation"] = sum(v for stage, v in planned.items() if stage.startswith("generation ("))
    metered = metered_flops(store.root)
    for stage in ("generation", "scoring", "features"):  # about an upper bound (the meter counts padding too)
        assert 0.95 * metered[stage] <= planned[stage] <= 3 * metered[stage], stage


def test_the_plan_report_prints_the_table_and_what_the_design_detects(cache_dir):
    few = plan_report(load_config("demo-baselines", TINY_ARGS), PlanOptions(budget_hours=1.0, rates_model="tiny-llama",
                                                                           rate_reps=1))
    assert "| generation (decode) |" in few and "| total |" in few and "GPU projection" in few
    assert "this design detects nothing: 3 users, 6 needed" in few  # 3 adaptation users of 8
    assert "no design with 6+ adaptation users (and half of the users training) fits" in few  # 8 users: 4 train
    more = plan_report(load_config("demo-baselines", TINY_ARGS + ["data.max_users=20"]),
                       PlanOptions(budget_hours=1.0, rates_model="tiny-llama", rate_reps=1))
    assert re.search(r"within 1 h here: \d+ adaptation users × \d+ queries .* detect \d+\.\d points; set "
                     r"split.adapt_fraction=", more)


def test_variance_components_are_recovered_from_per_query_rows():
    rng = np.random.default_rng(0)
    first, second = [], []
    for u in range(60):
        user_effect = rng.normal(0, 6)
        for q in range(5):
            base = rng.uniform(10, 40)
            first.append({"id": f"{u}-{q}", "user": f"u{u}", "rouge1": base + 5 + user_effect + rng.normal(0, 12)})
            second.append({"id": f"{u}-{q}", "user": f"u{u}", "rouge1": base})
    found = components_from_rows(first, second, "simulated")
    assert found.between == pytest.approx(6, abs=2) and found.within == pytest.approx(12, abs=1)


def test_more_users_or_queries_detect_less_and_proposals_fit_the_budget():
    assert detectable(32, 2, 8, 18) < detectable(16, 2, 8, 18) and detectable(16, 8, 8, 18) < detectable(16, 2, 8, 18)
    assert np.isnan(detectable(4, 10, 8, 18))
    designs = propose(type("C", (), {"between": 8.0, "within": 18.0})(), [20] * 40, lambda u, items: items / 100, 2.0)
    assert designs and all(d["hours"] <= 2.0 for d in designs)
    best = designs[0]
    assert best["users"] * best["queries"] <= 200 and best["detectable"] == min(d["detectable"] for d in designs)


@pytest.mark.parametrize("between", [7.5, 3.0])
def test_variance_components_are_unbiased_with_unequal_queries_per_user(between):
    """16 users with 1-4 queries each (issue #52): the n₀-corrected between-user variance is unbiased; the
    arithmetic mean of the counts (the estimator before) over-stated it by σ_w² · (mean(1/n) − 1/mean(n))."""
    from persalign.planner.power import variance_components

    rng, within, estimates, before = np.random.default_rng(1), 19.9, [], []
    for _ in range(4000):
        counts = rng.integers(1, 5, size=16)
        groups = [rng.normal(rng.normal(0, between), within, size=n) for n in counts]
        estimates.append(variance_components(groups)[0])
        means = [g.mean() for g in groups]
        pooled = sum(((g - g.mean()) ** 2).sum() for g in groups) / (counts.sum() - len(groups))
        before.append(np.var(means, ddof=1) - pooled / counts.mean())
    standard_error = np.std(estimates) / np.sqrt(len(estimates))
    assert abs(np.mean(estimates) - between ** 2) < 4 * standard_error
    assert np.mean(before) - between ** 2 > 8 * standard_error  # what the test would have caught


def test_the_queries_per_user_of_a_design_are_their_harmonic_mean():
    from persalign.planner.power import harmonic_queries

    assert harmonic_queries([1, 3]) == pytest.approx(1.5) and harmonic_queries([2, 2, 2]) == 2
    assert harmonic_queries([]) == 0.0 and harmonic_queries([0, 4]) == 4


PLAN = ["plan", "demo-baselines"] + TINY_ARGS


@pytest.mark.parametrize("option, value, rule", [
    ("--budget-hours", "0", "a number of hours > 0 and at most 100000"),
    ("--budget-hours", "-2", "a number of hours > 0 and at most 100000"),
    ("--budget-hours", "nan", "a number of hours > 0 and at most 100000"),
    ("--budget-hours", "inf", "a number of hours > 0 and at most 100000"),
    ("--budget-hours", "1e9", "a number of hours > 0 and at most 100000"),
    ("--gpu-tflops", "0", "a finite peak > 0 (TFLOP/s)"),
    ("--gpu-tflops", "-5", "a finite peak > 0 (TFLOP/s)"),
    ("--utilisation", "0", "a share of the peak in (0, 1]"),
    ("--utilisation", "2", "a share of the peak in (0, 1]"),
    ("--utilisation", "nan", "a share of the peak in (0, 1]"),
    ("--slowdown", "0", "a finite factor >= 1 (this machine's seconds ÷ its floor)"),
])
def test_plan_options_are_refused_in_one_line_before_any_work(capsys, option, value, rule):
    """Before (41e66f0): budget 0 ignored, negative / NaN / inf accepted, --gpu-tflops 0 silently the named GPU's,
    --utilisation 0 a ZeroDivisionError traceback, 2 and NaN accepted, --slowdown 0 accepted."""
    from tests.bad_input_helpers import cli_error

    line = cli_error(capsys, PLAN + [option, value])
    assert line == f"persalign: error: {option}: {float(value)!r} is not allowed (must be {rule})", line


def test_a_from_run_that_is_missing_empty_or_of_other_data_is_refused(tmp_path, capsys, cache_dir):
    """Before: each was silently replaced by the stated defaults while the plan said "no --from-run"."""
    from tests.bad_input_helpers import cli_error

    missing = cli_error(capsys, PLAN + ["--from-run", str(tmp_path / "nope")])
    assert missing.endswith("not a run folder (no config.yaml)"), missing
    (tmp_path / "empty").mkdir()
    assert "not a run folder" in cli_error(capsys, PLAN + ["--from-run", str(tmp_path / "empty")])
    config = load_config("demo-baselines", TINY_ARGS + ["decoders=[{name: zero_shot}]", "methods=[]"])
    store = run(config, tmp_path / "partial", log=lambda *_: None)  # no ICL cell: no users' spread to read
    assert "no finished ICL cell" in cli_error(capsys, PLAN + ["--from-run", str(store.root)])
    other = tmp_path / "other"
    other.mkdir()
    (other / "config.yaml").write_text((store.root / "config.yaml").read_text().replace("dataset: demo",
                                                                                     "dataset: lamp5"))
    assert "a run of other data (lamp5" in cli_error(capsys, PLAN + ["--from-run", str(other)])


def test_the_rates_are_measured_once_said_while_measuring_and_read_back(cache_dir, capsys):
    from persalign.planner.plan import cached_rates

    calls = []
    measure = lambda: calls.append(1) or {"gflop_per_s": {"decode": 1.0}}  # noqa: E731
    first = cached_rates(measure, str(cache_dir), "tiny-test")
    assert "measuring this machine's rates (tiny-test; about a minute" in capsys.readouterr().err
    assert cached_rates(measure, str(cache_dir), "tiny-test") == first and calls == [1]
    assert capsys.readouterr().err == ""


def rates_file(path, entries: dict, device: str = "NVIDIA H200", graphed: float | None = None):
    """A --gpu-rates file: {arch: (body parameters, {batch: rate of every kind})}; `graphed`: the graphed ARGS
    step's rate at every batch (candidates_graphed), else none."""
    kinds = ("decode", "candidates", "prefill")
    architectures = {arch: {"body_params": params, "batches": {
        str(b): {k: r for k in kinds} | ({"candidates_graphed": graphed} if graphed else {})
        for b, r in batches.items()}} for arch, (params, batches) in entries.items()}
    path.write_text(json.dumps({"device": device, "architectures": architectures}))
    return str(path)


def test_measured_gpu_rates_are_read_at_the_nearest_model_and_interpolated_between_batch_sizes(tmp_path):
    """Issue #55: on an H200 the FLOP-peak column was 70–286× optimistic; the plan can use measured rates."""
    from persalign.planner.plan import gpu_rates_for

    path = rates_file(tmp_path / "r.json", {"small": (1e8, {1: 100.0, 16: 1600.0, 64: 3200.0}),
                                            "big": (7e9, {1: 5.0, 16: 5.0})})
    rates, label = gpu_rates_for(path, 2e8, 4)  # nearer 1e8 than 7e9 on a log scale; 4 is halfway 1 -> 16 in log
    assert rates["decode"] == pytest.approx(400.0) and label == "NVIDIA H200, small at batch 4"
    assert gpu_rates_for(path, 2e8, 256)[0]["prefill"] == pytest.approx(3200.0)  # beyond: the largest measured
    assert gpu_rates_for(path, 3e9, 1)[0]["candidates"] == pytest.approx(5.0)


def test_the_plan_adds_a_column_at_measured_gpu_rates(tmp_path, cache_dir):
    path = rates_file(tmp_path / "r.json", {"any": (1e8, {1: 10.0, 64: 10.0})})  # 10 GFLOP/s whatever the batch
    options = PlanOptions(rates_model="tiny-llama", rate_reps=1, gpu_rates=path)
    config = load_config("demo-baselines", TINY_ARGS)
    text = plan_report(config, options)
    assert "GPU at measured rates (min, NVIDIA H200, any at batch" in text
    work = stage_work(config, design_of(config), shape_from_config(policy_config(config.policies[0], config.cache_dir)))
    row = next(line for line in text.splitlines() if line.startswith("| scoring |"))
    assert float(row.strip("| ").split(" | ")[-1]) == pytest.approx(work["scoring"] / 10e9 / 60, rel=2e-3)


def test_graphed_argss_measured_rate_projects_a_graphed_runs_generation_not_its_lambda_choice(tmp_path, cache_dir):
    """`args.cuda_graph` with a LoRA RM decodes ARGS with the captured step (docs/scale-out.md: 3.4–9.6× the
    reference at batch 1 on an H200): the GPU column reads ARGS's candidates (the query batches' and the λ
    grid's) at the file's graphed rate; a run without the graph at the eager one; a file without graphed rates
    says so."""
    from persalign.planner.plan import gpu_rates_for

    path = rates_file(tmp_path / "r.json", {"any": (1e8, {1: 10.0, 64: 10.0})}, graphed=40.0)
    options = PlanOptions(rates_model="tiny-llama", rate_reps=1, gpu_rates=path)

    def column(config, stage: str) -> float:
        row = next(line for line in plan_report(config, options).splitlines() if line.startswith(f"| {stage} |"))
        return float(row.strip("| ").split(" | ")[-1])

    graphed = load_config("demo-baselines", TINY_ARGS + ["reward.mode=lora", "args.cuda_graph=true"])
    eager = load_config("demo-baselines", TINY_ARGS + ["reward.mode=lora"])
    frozen = load_config("demo-baselines", TINY_ARGS + ["args.cuda_graph=true"])  # heads on the policy: eager
    stage = "generation (candidates)"
    assert column(eager, stage) == pytest.approx(4 * column(graphed, stage), rel=1e-2)  # printed to 3 digits
    assert column(frozen, stage) == pytest.approx(column(eager, stage), rel=2e-3)
    assert column(eager, "λ choice") == pytest.approx(4 * column(graphed, "λ choice"), rel=1e-2)
    assert column(graphed, "scoring") == pytest.approx(column(eager, "scoring"), rel=2e-3)  # not decoding
    assert "graphed ARGS" in plan_report(graphed, options)
    plain = rates_file(tmp_path / "plain.json", {"any": (1e8, {1: 10.0})})
    assert gpu_rates_for(plain, 1e8, 1, graphed=True)[1].endswith("eager ARGS: the file has no graphed rates")


@pytest.mark.parametrize("content, problem", [
    (None, "cannot be read"),
    ("not json", "not a rates file of benchmarks/gpu_rates.py (JSONDecodeError"),
    ('{"device": "x", "architectures": {}}', "no architecture with finite rates > 0"),
    ('{"device": "x", "architectures": {"a": {"body_params": 1e8, "batches": {"1": {"decode": 0, "candidates": 1, '
     '"prefill": 1}}}}}', "no architecture with finite rates > 0"),
    ('{"device": "x", "architectures": {"a": {"batches": {}}}}', "not a rates file of benchmarks/gpu_rates.py (KeyError"),
    ('{"device": "x", "architectures": {"a": {"body_params": 1e8, "batches": {"1": {"decode": 1, "candidates": 1, '
     '"prefill": 1, "candidates_graphed": -2}}}}}', "no architecture with finite rates > 0"),
])
def test_a_gpu_rates_file_that_is_missing_or_malformed_is_refused_in_one_line(tmp_path, capsys, content, problem):
    from tests.bad_input_helpers import cli_error

    path = tmp_path / "rates.json"
    if content is not None:
        path.write_text(content)
    line = cli_error(capsys, PLAN + ["--gpu-rates", str(path)])
    assert line.startswith(f"persalign: error: --gpu-rates {path}: {problem}"), line
