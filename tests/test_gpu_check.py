"""The GPU check's one command, dry-run on the CPU (issue #55): every step runs on tiny shapes and writes its
figures; without CUDA and without the dry run it stops at its first step, in one line.

    pytest tests/test_gpu_check.py
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "gpu_check.sh"
# the script's python3 is this environment's; wheelhouse/ (if fetched here) holds the GPU image's Python's wheels
ENV = {**os.environ, "PYTHON": sys.executable, "WHEELHOUSE": str(ROOT / "no-wheelhouse")}


@pytest.mark.slow
def test_the_dry_run_runs_every_step_and_writes_its_figures(tmp_path):
    done = subprocess.run(["bash", str(SCRIPT), "--cpu-dry-run", "--out", str(tmp_path)], capture_output=True,
                          text=True, timeout=600, env=ENV)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    results = json.loads((tmp_path / "gpu_check.json").read_text())
    assert all(status.startswith("passed") for status in results["status"].values()), results["status"]
    assert list(results["status"]) == ["environment", "correctness", "host_cpu", "timing", "pdpo_step", "study"]
    checks = results["correctness"]["checks"]
    assert set(checks) == {"args_candidate_reward", "tokens", "graphed_args", "graphed_args_metered_flops",
                           "lora_run_cuda_graph", "shared_args_pass", "tiny_run_float32", "peak_gpu_memory_mib",
                           "tiny_run_bf16", "graphed_decodes", "run_generation_cuda_graph"}
    assert checks["args_candidate_reward"]["largest_difference"]["teacher_forced"] <= 1e-4
    _the_host_cpu_step_compares_this_cpu_with_the_stored_one(results["host_cpu"], tmp_path)
    timing = results["timing"]["results"]["tiny"]
    for batch in ("batch1", "batch4"):
        assert {"greedy", "icl", "args", "args_shared_pass", "scoring"} <= set(timing[batch])
        assert all(timing[batch][stage]["tokens"] > 0 for stage in ("greedy", "icl", "args", "args_graph", "scoring",
                                                                     "greedy_graph", "icl_graph", "sampling",
                                                                     "sampling_graph"))
        assert "CUDA only" in timing[batch]["hf_static"]["error"]  # the compiled anchor is timed on a GPU alone
    assert timing["reference"]["prompts_per_s"] > 0 and results["timing"]["targets"]
    assert results["pdpo_step"]["steps"] == 1
    stages = {row["stage"]: row for row in results["study"]["stages"]}
    assert stages["generation"]["measured_s"] > 0 and stages["generation"]["planner_gpu_s"] > 0
    rates = json.loads((tmp_path / "gpu_rates.json").read_text())["architectures"]["tiny"]["batches"]
    assert set(rates) == {"1", "4"} and all(v > 0 for kinds in rates.values() for v in kinds.values())
    assert stages["generation"]["planner_rates_s"] > 0 and stages["generation"]["measured_over_rates"] > 0
    report = (tmp_path / "gpu_check.md").read_text()
    assert "| tiny | 4 |" in report and "| generation |" in report and "P-DPO step at tiny" in report
    assert "transformers static-cache generate" in report and "graphed greedy ≥ transformers'" in report


@pytest.mark.slow
def test_without_cuda_the_check_stops_at_its_first_step_in_one_line(tmp_path):
    done = subprocess.run(["bash", str(SCRIPT), "--out", str(tmp_path)], capture_output=True, text=True, timeout=300,
                          env=ENV)
    assert done.returncode == 1
    assert done.stdout.strip().splitlines() == ["gpu check: environment: FAILED: torch sees no CUDA device "
                                                "(use --cpu-dry-run on a CPU machine)"]
    assert "Traceback" not in done.stderr
    results = json.loads((tmp_path / "gpu_check.json").read_text())
    assert list(results["status"]) == ["environment"]


def _the_host_cpu_step_compares_this_cpu_with_the_stored_one(step: dict, out: Path) -> None:
    """Where this process computes with the stored trace's numerics (CPU, torch, kernels, MKL branch, threads),
    every op and golden value must reproduce; elsewhere the step must still say where they part."""
    stored = json.loads((ROOT / "benchmarks" / "measured" / "op_trace_amd_epyc.json").read_text())
    here = json.loads((out / "op_trace.json").read_text())
    assert step["op_trace"]["ops"] == len(here["ops"]) > 400 and len(here["params"]) == 21
    assert step["goldens"] == {}  # the dry run leaves the golden runs to tests/test_golden.py
    if here["facts"]["numerics"] == stored["facts"]["numerics"]:
        assert step["op_trace"]["ops_with_other_outputs"] == 0 and not step["op_trace"]["params_differing"]
    elif step["op_trace"]["ops_with_other_outputs"]:
        assert step["op_trace"]["first_op_with_same_inputs_other_outputs"] or step["op_trace"]["params_differing"]


def test_the_op_trace_names_the_first_op_whose_same_inputs_gave_other_outputs():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import op_trace

    stored = json.loads((ROOT / "benchmarks" / "measured" / "op_trace_amd_epyc.json").read_text())
    assert op_trace.compare(stored, stored)["first_op_with_same_inputs_other_outputs"] is None
    index = next(i for i, op in enumerate(stored["ops"]) if op[0] == "aten.mm.default" and op[2])
    other = json.loads(json.dumps(stored))
    for op in other["ops"][index:]:  # that product's output came out otherwise, and so everything after it
        op[2] = [d + "x" for d in op[2]]
    for op in other["ops"][index + 1:]:
        op[1] = [d + "x" for d in op[1]]
    found = op_trace.compare(stored, other)
    assert found["first_op_with_same_inputs_other_outputs"] == {"index": index, "op": "aten.mm.default",
                                                                "why": "same inputs, other outputs"}
    assert found["ops_with_other_outputs"] == len(stored["ops"]) - index - sum(not op[2] for op in stored["ops"][index:])


def test_the_golden_comparison_counts_every_value_that_moved_and_its_generations():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import op_trace

    stored = json.loads((ROOT / "tests" / "golden" / "tiny.json").read_text())["values"]
    assert op_trace.count_differences(stored, stored)["differing"] == 0
    moved = json.loads(json.dumps(stored))
    cell = next(iter(moved.values()))
    cell["rows"][0]["generation"] += " and more"
    cell["summary"]["rm_score"] += 1e-12
    found = op_trace.count_differences(stored, moved)
    assert (found["differing"], found["generations_differing"]) == (2, 1) and found["values"] > 700
