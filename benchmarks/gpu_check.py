"""One command that checks and times persalign on a CUDA GPU at the paper's scales (issue #55).

Steps, in order; the first that fails stops the check with one line (`--keep-going` runs the rest):

1. environment: CUDA present, the packages persalign needs importable, their versions;
2. correctness: `pytest -m cuda tests/test_cuda.py` — ARGS's candidate reward = the teacher-forced one, the
   tokens and the tiny end-to-end run's numbers = the CPU's (float32), its decisions in bf16, batch
   invariance, the shared ARGS pass, the cells' GPU memory peak;
3. host_cpu: the machine's own CPU against the one the goldens were stored on (`op_trace.py`: the first torch
   op whose outputs part from the stored trace's; the golden tiny and study runs here, value by value);
4. timing: `bench_gpu.py` — greedy, ICL (4 demonstrations), ARGS (k = 10) with the paper's 0.5B RM, the
   shared pass, policy-accuracy scoring at batch 1 / 16 / 64 for Qwen2.5 0.5B / 1.5B / 7B shapes in bf16;
   ARGS ÷ greedy and ÷ the reference design; peak GPU memory against docs/scale-out.md's projection;
5. pdpo_step: one P-DPO training step (persalign's own `fit`, 8 pairs) at 7B: seconds and peak memory;
6. study: `persalign run configs/scales_dry_run.yaml device=cuda` (0.5B), its stage seconds next to the
   planner's GPU column (counted FLOPs ÷ the GPU's peak × utilisation): measured ÷ projected per stage.

Everything lands in `--out` as gpu_check.json and gpu_check.md (and the logs of steps 2 and 6, step 3's op
trace and golden values).
`--cpu-dry-run` runs every step on tiny shapes on the CPU (tests/test_gpu_check.py runs it in the suite).

    bash benchmarks/gpu_check.sh --out gpu-check                        # on the GPU machine (installs wheels)
    python benchmarks/gpu_check.py --cpu-dry-run --out /tmp/gpu-check   # here
"""

from __future__ import annotations

import argparse
import itertools
import json
import subprocess
import sys
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("torch", "transformers", "tokenizers", "peft", "safetensors", "rouge_score", "nltk", "bert_score",
            "scipy", "pandas", "matplotlib", "markdown_it", "yaml", "rich", "pytest")
# docs/scale-out.md's projected peak GPU GiB (benchmarks/paper_scale.py; batch 16): what step 3 checks against
PROJECTED_PEAK_GIB = {"qwen2.5-0.5b": {"icl": 1.07, "args": 1.9}, "qwen2.5-1.5b": {"icl": 3.2, "args": 3.88},
                      "qwen2.5-7b": {"icl": 14.8, "args": 15.2, "pdpo_step": 23.6}}
GPU_MEMORY_GIB = 80  # every stage of a 7B study within one 80 GB GPU (the target)


class StepFailed(Exception):
    """A step's one-line reason."""


@dataclass
class Plan:
    device: str
    archs: list[str]
    batches: list[int]
    pdpo_arch: str
    study: list[str] = field(default_factory=list)  # overrides of configs/scales_dry_run.yaml
    gpu: str = "h100"


def plan_of(args) -> Plan:
    if args.cpu_dry_run:
        return Plan("cpu", ["tiny"], [1, 4], "tiny", ["policies=[tiny-llama]", "dtype=float32", "device=cpu"])
    gpu = "h200" if "H200" in _gpu_name() else "h100"
    return Plan("cuda", args.archs, [1, 16, 64], "qwen2.5-7b", ["device=cuda"], gpu)


def _gpu_name() -> str:
    import torch

    return torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no CUDA"


def environment(plan: Plan, out: Path) -> dict:
    import importlib

    import torch

    missing = []
    for name in PACKAGES:
        try:
            importlib.import_module(name)
        except ImportError:
            missing.append(name)
    if missing:
        raise StepFailed(f"missing packages {missing}: put their wheels in wheelhouse/ (make gpu-wheels)")
    if plan.device == "cuda" and not torch.cuda.is_available():
        raise StepFailed("torch sees no CUDA device (use --cpu-dry-run on a CPU machine)")
    from importlib.metadata import version

    return {"device": _gpu_name() if plan.device == "cuda" else "cpu", "torch": torch.__version__,
            "cuda": torch.version.cuda, "transformers": version("transformers"), "python": sys.version.split()[0]}


def correctness(plan: Plan, out: Path) -> dict:
    record = out / "cuda_checks.json"
    record.unlink(missing_ok=True)
    import op_trace  # its child-process environment: persalign's source and the tests first on the path

    env = {**op_trace.source_env(), "PERSALIGN_CHECK_DEVICE": plan.device, "PERSALIGN_CHECK_RECORD": str(record)}
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-m", "cuda", "-p", "no:cacheprovider",
                           "tests/test_cuda.py"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    (out / "cuda_tests.log").write_text(done.stdout + done.stderr)
    checks = json.loads(record.read_text()) if record.exists() else {}
    summary = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else done.stderr[-300:]
    if done.returncode != 0:
        raise StepFailed(f"pytest -m cuda: {summary} (cuda_tests.log)")
    return {"pytest": summary, "checks": checks}


def host_cpu(plan: Plan, out: Path) -> dict:
    """This machine's CPU against the AMD EPYC the goldens were stored on: the first torch op whose numbers part
    (benchmarks/op_trace.py), and the golden runs here, value by value (not in the dry run: tests/test_golden.py
    runs them on the CPU)."""
    import op_trace

    return op_trace.host_check(out, [] if plan.device == "cpu" else ["tiny", "study"])  # the suite runs both


def timing(plan: Plan, out: Path) -> dict:
    import bench_gpu

    args = bench_gpu.parser().parse_args(["--device", plan.device, "--archs", *plan.archs,
                                          "--batches", *map(str, plan.batches)])
    result = bench_gpu.run(args)
    result["targets"] = targets(result["results"], plan)
    import gpu_rates  # the same timings in the planner's units: step 5 and `persalign plan --gpu-rates` read them

    (out / "gpu_rates.json").write_text(json.dumps(gpu_rates.rates_from(result), indent=1) + "\n")
    return result


def targets(results: dict, plan: Plan) -> list[dict]:
    """The issue's targets, each with the measured value and whether it is met."""
    middle = plan.batches[1]
    rows = []
    for arch, out in results.items():
        ratio = out[f"batch{middle}"]["args_over_greedy"]
        rows.append({"target": f"{arch}: ARGS ÷ greedy at batch {middle} ≥ 0.5", "value": ratio, "met": ratio >= 0.5})
        for (batch, floor), (stage, name) in itertools.product(((1, 3.0), (middle, 10.0)),
                                                               (("args", "ARGS"), ("args_graph", "graphed ARGS"))):
            value = out[f"batch{batch}"][f"{stage}_over_reference"]
            rows.append({"target": f"{arch}: {name} ÷ reference at batch {batch} ≥ {floor:g}×", "value": value,
                         "met": value is not None and value >= floor})
        rows += decode_targets(arch, out, middle)
        for stage, projected in PROJECTED_PEAK_GIB.get(arch, {}).items():
            measured = out[f"batch{middle}"].get(stage, {}).get("peak_gib")
            if measured is not None:
                rows.append({"target": f"{arch}: peak GiB of {stage} at batch {middle} (projected {projected})",
                             "value": measured, "met": measured <= GPU_MEMORY_GIB})
    return rows


GREEDY_FLOORS = {"qwen2.5-0.5b": {1: 200, 16: 4000}, "qwen2.5-7b": {1: 130, 16: 1900}}  # issue #76, tok/s
GRAPHED_ARGS_BEFORE = {"qwen2.5-0.5b": {1: 129, 16: 1698, 64: 4609}, "qwen2.5-1.5b": {1: 96, 16: 1366, 64: 3578},
                       "qwen2.5-7b": {1: 72, 16: 958, 64: 2143}}  # graphed ARGS tok/s before issue #76 (its table)


def decode_targets(arch: str, out: dict, middle: int) -> list[dict]:
    """Issue #76's rows: graphed greedy's floors and transformers' compiled generate as its anchor, sampling ≥ 0.5 ×
    greedy at the middle batch, graphed ARGS no slower than before (a stage that failed reads as not met)."""
    def speed(batch, stage):
        return out.get(f"batch{batch}", {}).get(stage, {}).get("tokens_per_s")

    rows = []
    for batch, floor in GREEDY_FLOORS.get(arch, {}).items():
        rows.append(row(f"{arch}: graphed greedy at batch {batch} ≥ {floor} tok/s", speed(batch, "greedy_graph"),
                        floor))
    for batch in [int(key[5:]) for key in out if key.startswith("batch")]:
        anchor = speed(batch, "hf_static")
        rows.append(row(f"{arch}: graphed greedy ≥ transformers' static-cache generate at batch {batch}",
                        speed(batch, "greedy_graph"), anchor if anchor is not None else float("inf")))
        before = GRAPHED_ARGS_BEFORE.get(arch, {}).get(batch)
        if before:
            rows.append(row(f"{arch}: graphed ARGS at batch {batch} ≥ {before} tok/s (before issue #76)",
                            speed(batch, "args_graph"), before))
    greedy_graph = speed(middle, "greedy_graph")
    sampling = speed(middle, "sampling_graph")
    ratio = sampling / greedy_graph if sampling is not None and greedy_graph else None
    rows.append(row(f"{arch}: graphed sampling ÷ graphed greedy at batch {middle} ≥ 0.5", ratio, 0.5))
    return rows


def row(target: str, value, floor: float) -> dict:
    return {"target": target, "value": value, "met": value is not None and value >= floor}


def pdpo_step(plan: Plan, out: Path) -> dict:
    import random

    import bench_gpu
    import torch

    from persalign.core.registry import METHODS
    from persalign.models.device import resolve_dtype
    from persalign.rewards.train import PairData

    device = torch.device(plan.device)
    tokenizer = bench_gpu.id_tokenizer(bench_gpu.ARCHITECTURES[plan.pdpo_arch]().vocab_size)
    policy = bench_gpu.build(plan.pdpo_arch, device, resolve_dtype("auto", device), 0, tokenizer)
    rng = random.Random(0)
    ids = lambda n, lengths: bench_gpu.random_ids(n, len(tokenizer), lengths, rng)  # noqa: E731
    pairs = PairData(["u"] * 8, ids(8, (48, 160)), ids(8, (12, 24)), ids(8, (12, 24)))
    spec = METHODS.get("pdpo")
    method = spec(policy.model.config.hidden_size, spec.Settings(seed=0, max_steps=1, batch_size=8))
    if device.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    started = time.perf_counter()
    log = method.fit(policy, pairs)
    if device.type == "cuda":
        torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() / 2**30 if device.type == "cuda" else None
    return {"arch": plan.pdpo_arch, "steps": log.steps, "pairs": 8, "seconds": time.perf_counter() - started,
            "peak_gib": peak, "projected_peak_gib": PROJECTED_PEAK_GIB.get(plan.pdpo_arch, {}).get("pdpo_step"),
            "fits_80gb": peak is None or peak <= GPU_MEMORY_GIB}


def study(plan: Plan, out: Path) -> dict:
    import gpu_study

    try:
        rates = out / "gpu_rates.json"
        return gpu_study.compare(plan.study, plan.gpu, out, str(rates) if rates.is_file() else None)
    except RuntimeError as exc:
        raise StepFailed(f"{exc} (study.log)") from exc


STEPS = {"environment": environment, "correctness": correctness, "host_cpu": host_cpu, "timing": timing,
         "pdpo_step": pdpo_step, "study": study}


def report(results: dict) -> str:
    """gpu_check.md: what ran where, each step's figures as tables."""
    import bench_gpu
    import gpu_study

    env = results.get("environment", {})
    lines = ["# persalign GPU check", "", f"Device: {env.get('device', '?')}; torch {env.get('torch', '?')} "
             f"(CUDA {env.get('cuda')}), transformers {env.get('transformers', '?')}. Command: `{results['command']}`.",
             ""]
    for name, status in results["status"].items():
        lines.append(f"- {name}: {status}")
    if "correctness" in results:
        lines += ["", "## Correct on the device", "", f"pytest -m cuda: {results['correctness']['pytest']}", "",
                  "```json", json.dumps(results["correctness"]["checks"], indent=1)[:4000], "```"]
    if "host_cpu" in results:
        trace, goldens = results["host_cpu"]["op_trace"], results["host_cpu"]["goldens"]
        lines += ["", "## This CPU against the goldens' (op_trace.json)", "",
                  f"Op trace: {trace['ops_with_other_outputs']} of {trace['ops']} ops with other outputs; parameters "
                  f"differing {len(trace['params_differing'])}; first op with the stored inputs and other outputs: "
                  f"{trace['first_op_with_same_inputs_other_outputs']}; build facts changed: "
                  f"{sorted(trace['facts_changed'])}."]
        lines += [f"- golden {which}: {g['differing']} of {g['values']} values differ ({g['generations_differing']} "
                  f"generations); first {g['first'][:2]}" for which, g in goldens.items()]
    if "timing" in results:
        lines += ["", f"## Timed ({results['timing']['dtype']} on {env.get('device', '?')})", ""]
        lines += bench_gpu.markdown(results["timing"]["results"])
        lines += [""] + bench_gpu.decode_paths_markdown(results["timing"]["results"])
        lines += ["", "| target | measured | met |", "|---|---|---|"]
        lines += [f"| {t['target']} | {'–' if t['value'] is None else format(t['value'], '.2f')} | "
                  f"{'yes' if t['met'] else 'NO'} |"
                  for t in results["timing"]["targets"]]
    if "pdpo_step" in results:
        step = results["pdpo_step"]
        peak = "–" if step["peak_gib"] is None else f"{step['peak_gib']:.1f} GiB"
        lines += ["", f"P-DPO step at {step['arch']} ({step['pairs']} pairs, persalign's fit): "
                  f"{step['seconds']:.1f} s, peak {peak} (projected {step['projected_peak_gib']})."]
    if "study" in results:
        lines += ["", "## A dry-run study against the planner", ""] + gpu_study.markdown(results["study"])
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="gpu-check", help="folder for gpu_check.json, gpu_check.md and logs")
    parser.add_argument("--cpu-dry-run", action="store_true", help="every step on tiny shapes on the CPU")
    parser.add_argument("--keep-going", action="store_true", help="run every step even after one failed")
    parser.add_argument("--steps", nargs="+", default=list(STEPS), choices=list(STEPS))
    parser.add_argument("--archs", nargs="+", default=["qwen2.5-0.5b", "qwen2.5-1.5b", "qwen2.5-7b"])
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    plan = plan_of(args)
    results: dict = {"command": " ".join(["gpu_check.py", *sys.argv[1:]]), "status": {}}
    failed = False
    for name in args.steps:
        started = time.perf_counter()
        try:
            results[name] = STEPS[name](plan, out)
            results["status"][name] = f"passed in {time.perf_counter() - started:.0f} s"
        except StepFailed as exc:
            results["status"][name] = f"FAILED: {exc}"
            failed = True
        except Exception as exc:  # noqa: BLE001 — any error of a step ends it in one line; the traceback is kept
            with (out / "errors.log").open("a") as log:
                log.write(f"== {name}\n{traceback.format_exc()}\n")
            results["status"][name] = f"FAILED: {type(exc).__name__}: {str(exc)[:300]} (errors.log)"
            failed = True
        print(f"gpu check: {name}: {results['status'][name]}", flush=True)
        (out / "gpu_check.json").write_text(json.dumps(results, indent=1, default=str))
        (out / "gpu_check.md").write_text(report(results))
        if failed and not args.keep_going:
            break
    return 1 if failed else 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    sys.exit(main())
