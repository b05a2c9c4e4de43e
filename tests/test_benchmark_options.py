"""Every numeric or path option of the benchmark scripts refuses a bad value in argparse's one line, exit 2,
before any model is built or any file written (issue #56). Run in this process: each script's `main()` with
the bad option; argparse stops it while it reads its arguments.

    pytest tests/test_benchmark_options.py
"""

from __future__ import annotations

import runpy
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
COUNT = "must be a whole number >= 1"
TRUE_MEANS, CELL = "coverage_true_correlation.py", "must be STATISTIC/METHODS/RELIABILITY/RHO"
CASES = [  # script, arguments, what the one line says
    ("bench_args.py", ["--k", "0"], COUNT), ("bench_args.py", ["--lam", "nan"], "must be a finite number >= 0"),
    ("bench_args.py", ["--lam", "-1"], "must be a finite number >= 0"),
    ("bench_args.py", ["--max-new-tokens", "-3"], COUNT), ("bench_args.py", ["--reps", "0"], COUNT),
    ("bench_batching.py", ["--limit", "0"], COUNT), ("bench_batching.py", ["--budget", "-1"], COUNT),
    ("bench_bf16.py", ["--prompts", "0"], COUNT), ("bench_bf16.py", ["--steps", "x"], COUNT),
    ("bench_decode_paths.py", ["--prompts", "0"], COUNT), ("bench_decode_paths.py", ["--batch", "0"], COUNT),
    ("bench_decode_paths.py", ["--max-new-tokens", "0"], COUNT), ("bench_decode_paths.py", ["--reps", "0"], COUNT),
    ("bench_gpu.py", ["--batches", "1", "0"], COUNT), ("bench_gpu.py", ["--batch1-prompts", "0"], COUNT),
    ("bench_gpu.py", ["--reference-prompts", "0"], COUNT), ("bench_gpu.py", ["--max-new", "0"], COUNT),
    ("bench_gpu.py", ["--k", "0"], COUNT), ("bench_gpu.py", ["--archs", "qwen9"], "invalid choice"),
    ("bench_policy_scoring.py", ["--pairs", "0"], COUNT),
    ("bench_policy_scoring.py", ["--lam", "inf"], "must be a finite number >= 0"),
    ("bench_floor.py", ["--from-run", "/nonexistent/run"], "no such folder"),
    ("bench_floor.py", ["--workers", "0", "--from-run", "/nonexistent/run"], COUNT),
    ("bench_study.py", ["--from-run", "/nonexistent/run"], "no such folder"),
    ("bench_study.py", ["--from-run", "/"], "not a run folder (no config.yaml)"),
    ("bench_floor.py", ["--from-run", "/"], "not a run folder (no config.yaml)"),
    ("coverage_finding3.py", ["--repetitions", "0"], COUNT),
    (TRUE_MEANS, ["--repetitions", "-5"], COUNT), (TRUE_MEANS, ["--seed", "-1"], "a whole number >= 0"),
    (TRUE_MEANS, ["--cells", "pearson/20/1.5/0.9"], CELL), (TRUE_MEANS, ["--cells", "tau/20"], CELL),
    (TRUE_MEANS, ["--noise-corr", "1"], "a correlation in (-1, 1)"),
    (TRUE_MEANS, ["--group", "0/0.5"], "must be SIZE/CORR"), (TRUE_MEANS, ["--group", "2/1"], "must be SIZE/CORR"),
    (TRUE_MEANS, ["--users", "0"], COUNT), (TRUE_MEANS, ["--min-reliability", "nan"], "a number <= 1 or -inf"),
    (TRUE_MEANS, ["--min-reliability", "1.5"], "a number <= 1 or -inf"),
    (TRUE_MEANS, ["--true-df", "2"], "a whole number >= 3"), (TRUE_MEANS, ["--sim-tails", "none", "1"], "'none' or"),
    (TRUE_MEANS, ["--noise", "cauchy"], "invalid choice"), ("coverage_difference.py", ["--repetitions", "0"], COUNT),
    ("spread_conditioning.py", ["--cells", "20/1.5/0/0.6"], "must be METHODS/RELIABILITY/RHO/NOISE_CORR"),
    ("spread_conditioning.py", ["--cells", "20/0.3"], "must be METHODS/RELIABILITY/RHO/NOISE_CORR"),
    ("spread_conditioning.py", ["--repetitions", "0"], COUNT), ("spread_conditioning.py", ["--seed", "-2"],
                                                                 "a whole number >= 0"),
    ("spread_conditioning.py", ["--test", "wald"], "invalid choice"),
    ("paper_scale.py", ["--bench", "/nonexistent.jsonl"], "no such file"),
    ("plan_check.py", ["--from-run", "/", "--check-run", "/"], "not a run folder (no config.yaml)"),
    ("paper_scale.py", ["--utilisation", "0"], "must be a share in (0, 1]"),
    ("paper_scale.py", ["--utilisation", "1.5"], "must be a share in (0, 1]"),
    ("gpu_rates.py", ["/nonexistent.json", "-o", "/tmp/x.json"], "no such file"),
    ("gpu_study.py", ["--gpu", "h900"], "invalid choice"),
    ("gpu_study.py", ["--recorded", "/nonexistent.json"], "no such file"),
    ("gpu_study.py", ["--rates", "/nonexistent.json"], "no such file"),
    ("bench_scales.py", ["--sizes", "70b"], "invalid choice"),
    ("graph_agreement.py", ["--policies", "0"], COUNT), ("graph_agreement.py", ["--heads", "-1"], COUNT),
]


@pytest.mark.parametrize("script, arguments, problem", CASES, ids=[f"{s}{' '.join(a)}" for s, a, _ in CASES])
def test_a_bad_benchmark_option_is_one_line(script, arguments, problem, monkeypatch, capsys):
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    monkeypatch.setattr(sys, "argv", [script, *arguments])
    with pytest.raises(SystemExit) as stopped:
        runpy.run_path(str(BENCHMARKS / script), run_name="__main__")
    error = capsys.readouterr().err.strip().splitlines()
    assert stopped.value.code == 2 and problem in error[-1], error
    assert "Traceback" not in "\n".join(error)


def test_every_numeric_option_of_every_benchmark_is_checked():
    """No `type=int` or `type=float` is left in a benchmark's options: each goes through common.py's types."""
    loose = [f"{p.name}:{n}" for p in sorted(BENCHMARKS.glob("*.py"))
             for n, line in enumerate(p.read_text().splitlines(), 1)
             if "add_argument" in line and ("type=int" in line or "type=float" in line)]
    assert not loose, loose


def test_the_wall_floor_counts_unmetered_stages_at_their_seconds_and_spreads_over_the_workers(capsys):
    sys.path.insert(0, str(BENCHMARKS))
    from bench_floor import wall_floor, whole_floor_seconds

    stages = {"scoring": {"seconds": 300.0, "floor_s": 200.0}, "metrics": {"seconds": 40.0, "floor_s": None}}
    assert whole_floor_seconds(1000.0, stages) == 1240.0
    assert wall_floor({"whole_floor_s": 1240.0}, 2)["wall_floor_min"] == 1240.0 / 2 / 60
    assert "2 single-threaded workers" in capsys.readouterr().out
