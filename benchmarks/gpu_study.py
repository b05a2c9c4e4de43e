"""Step 5 of the GPU check (issue #55): a dry-run study on the GPU, its stage seconds next to `persalign plan`'s
GPU column.

`configs/scales_dry_run.yaml` (Qwen2.5-0.5B shape, random bf16 weights, every stage: features, training,
adaptation, the λ choice, ARGS, ICL, ICL-RAG, Best-of-N, P-DPO, scoring) runs as `persalign run` would, in a
child process. The planner's GPU column is the counted FLOPs of each stage (counted_plan.stage_work, the
cost model every run counts with) ÷ the GPU's dense bf16 peak × the planner's utilisation; beside it the
seconds the run measured for that stage (cells' stage_seconds, the trained models' train_log.json), and
measured ÷ projected: the correction a reader applies to the planner's GPU column at this size.

    python benchmarks/gpu_study.py --device cuda --gpu h200      # alone; gpu_check.py runs it as step 5
    python benchmarks/gpu_study.py --gpu h200 --recorded benchmarks/measured/h200_gpu_check.json \
        --rates benchmarks/measured/h200_rates.json                # a stored check's study beside both columns
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "configs" / "scales_dry_run.yaml"
RUN = "import sys; from persalign.cli.commands import main; sys.exit(main(sys.argv[1:]))"
# planner stages -> what the run measured for them (None: not timed apart; it is in the run's wall time)
MEASURED_AS = {"features": "features_s", "λ choice": None, "generation": "generation_s", "scoring": "scoring_s"}


def run_study(overrides: list[str], run_dir: Path, log: Path) -> float:
    """The dry-run study in a child process; its wall seconds (model building and training included)."""
    started = time.perf_counter()
    with log.open("w") as out:
        done = subprocess.run([sys.executable, "-c", RUN, "run", str(CONFIG), "-o", str(run_dir), *overrides],
                              cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, timeout=1800)
    if done.returncode != 0:
        tail = log.read_text().strip().splitlines()[-1:] or ["(no output)"]
        raise RuntimeError(f"the dry-run study exited {done.returncode}: {tail[0][:200]}")
    return time.perf_counter() - started


def measured_seconds(run_dir: Path) -> dict[str, float]:
    """Seconds per stage the run recorded: every cell's stage_seconds, every trained model's train log."""
    seconds: dict[str, float] = {}
    for path in run_dir.rglob("metrics.json"):
        for key, value in json.loads(path.read_text()).get("stage_seconds", {}).items():
            seconds[key] = seconds.get(key, 0.0) + value
    for path in run_dir.rglob("train_log.json"):
        log = json.loads(path.read_text())
        for key in ("features_s", "fit_s", "adapt_s"):
            seconds[key] = seconds.get(key, 0.0) + (log.get(key) or 0.0)
    return seconds


def planner_gpu_seconds(overrides: list[str], gpu: str, rates: str | None) -> dict:
    """Counted FLOPs per stage, the planner's GPU seconds per stage (FLOP peak × utilisation, and with `rates`
    at a GPU's measured rates too), generation's three parts (prefill, decode, candidates) summed as the run
    times them."""
    from persalign.core.config import load_config
    from persalign.models.checks import policy_config
    from persalign.planner.plan import GPU_PEAKS, PlanOptions, generation_rows, gpu_rates_for, projected_seconds
    from persalign.runner.counted_plan import design_of, shape_from_config, stage_work

    config = load_config(str(CONFIG), overrides)
    design = design_of(config)
    shape = shape_from_config(policy_config(config.policies[0], config.cache_dir))
    work = stage_work(config, design, shape)
    utilisation = PlanOptions().utilisation
    at_rates = {}
    if rates:
        rates_here = gpu_rates_for(rates, shape.body_params, generation_rows(config, design))[0]
        at_rates = projected_seconds(work, rates_here, 1.0)
    merged = {"flops": {}, "peak": {}, "rates": {}}
    for stage, value in work.items():
        key = "generation" if stage.startswith("generation") else stage
        for name, seconds in (("flops", value), ("peak", value / (GPU_PEAKS[gpu] * 1e12 * utilisation)),
                              ("rates", at_rates.get(stage))):
            if seconds is not None:
                merged[name][key] = merged[name].get(key, 0.0) + seconds
    return {**merged, "utilisation": utilisation}


def compare(overrides: list[str], gpu: str, out: Path, rates: str | None = None) -> dict:
    """Run the dry-run study on the device, then set its stage seconds beside the planner's."""
    with tempfile.TemporaryDirectory(prefix="gpu-check-study-") as tmp:
        wall = run_study(overrides, Path(tmp) / "run", out / "study.log")
        seconds = measured_seconds(Path(tmp) / "run")
    return beside_planner(overrides, gpu, {"wall_s": wall, "recorded_s": seconds}, rates)


def beside_planner(overrides: list[str], gpu: str, run: dict, rates: str | None) -> dict:
    """A run's recorded stage seconds (`run`: wall_s, recorded_s) beside the planner's two GPU columns."""
    planned, seconds = planner_gpu_seconds(overrides, gpu, rates), run["recorded_s"]
    stages = []
    for stage, flop in planned["flops"].items():
        key = MEASURED_AS.get(stage)
        measured = seconds.get(key) if key else None
        row = {"stage": stage, "counted_tflop": flop / 1e12, "planner_gpu_s": planned["peak"][stage],
               "planner_rates_s": planned["rates"].get(stage), "measured_s": measured}
        for name, column in (("measured_over_planner", "planner_gpu_s"), ("measured_over_rates", "planner_rates_s")):
            row[name] = measured / row[column] if measured and row[column] else None
        stages.append(row)
    training = seconds.get("fit_s", 0.0) + seconds.get("adapt_s", 0.0)
    return {"gpu": gpu, "utilisation": planned["utilisation"], "rates": rates, "wall_s": run["wall_s"],
            "training_s": training, "stages": stages, "planner_total_s": sum(planned["peak"].values()),
            "recorded_s": seconds}


def markdown(result: dict) -> list[str]:
    rated = any(row.get("planner_rates_s") for row in result["stages"])
    lines = [f"Dry-run study (`configs/scales_dry_run.yaml`) on the GPU: {result['wall_s']:.0f} s wall, of which "
             f"training and adaptation {result['training_s']:.0f} s (the planner does not project training). "
             f"Planner: counted FLOPs ÷ ({result['gpu']} peak × {result['utilisation']:g})"
             + (f"; and at the rates measured in the timing step ({result['rates']})." if rated else "."), "",
             "| stage | counted TFLOP | planner GPU s | measured s | measured ÷ planner |"
             + (" planner at measured rates s | measured ÷ it |" if rated else ""),
             "|---|---|---|---|---|" + ("---|---|" if rated else "")]
    ratio = lambda v: "–" if v is None else f"{v:.1f}×" if v < 10 else f"{v:.0f}×"  # noqa: E731
    for row in result["stages"]:
        measured = "in the wall time" if row["measured_s"] is None else f"{row['measured_s']:.2f}"
        line = f"| {row['stage']} | {row['counted_tflop']:.4f} | {row['planner_gpu_s']:.4f} | {measured} | " \
               f"{ratio(row['measured_over_planner'])} |"
        if rated:
            line += f" {row['planner_rates_s']:.3f} | {ratio(row.get('measured_over_rates'))} |"
        lines.append(line)
    lines.append(f"| total | – | {result['planner_total_s']:.3f} | {result['wall_s']:.0f} (wall) | "
                 f"{result['wall_s'] / result['planner_total_s']:.0f}× |" + (" | |" if rated else ""))
    return lines


def main() -> None:
    from common import existing_file
    from persalign.planner.plan import GPU_PEAKS

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--gpu", default="h100", choices=sorted(GPU_PEAKS),
                        help="the planner's GPU column to compare with")
    parser.add_argument("--rates", type=existing_file,
                        help="a GPU's measured rates (benchmarks/gpu_rates.py) for a second column")
    parser.add_argument("--recorded", type=existing_file,
                        help="a gpu_check.json whose study step ran: compare its seconds, run nothing")
    parser.add_argument("--out", default=".", help="folder of study.log")
    args = parser.parse_args()
    overrides = [f"device={args.device}"]
    if args.recorded:
        result = beside_planner(overrides, args.gpu, json.loads(Path(args.recorded).read_text())["study"], args.rates)
    else:
        result = compare(overrides, args.gpu, Path(args.out), args.rates)
    print("\n".join(markdown(result)))
    print(json.dumps(result))


if __name__ == "__main__":
    main()
