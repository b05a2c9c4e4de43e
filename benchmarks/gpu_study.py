"""Step 5 of the GPU check (issue #55): a dry-run study on the GPU, its stage seconds next to `persalign plan`'s
GPU column.

`configs/scales_dry_run.yaml` (Qwen2.5-0.5B shape, random bf16 weights, every stage: features, training,
adaptation, the λ choice, ARGS, ICL, ICL-RAG, Best-of-N, P-DPO, scoring) runs as `persalign run` would, in a
child process. The planner's GPU column is the counted FLOPs of each stage (counted_plan.stage_work, the
cost model every run counts with) ÷ the GPU's dense bf16 peak × the planner's utilisation; beside it the
seconds the run measured for that stage (cells' stage_seconds, the trained models' train_log.json), and
measured ÷ projected: the correction a reader applies to the planner's GPU column at this size.

    python benchmarks/gpu_study.py --device cuda --gpu h200      # alone; gpu_check.py runs it as step 5
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
RUN = "import sys; from persalign.cli import main; sys.exit(main(sys.argv[1:]))"
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


def planner_gpu_seconds(overrides: list[str], gpu: str) -> tuple[dict[str, float], dict[str, float], float]:
    """(counted FLOPs per stage, the planner's GPU seconds per stage, its utilisation), generation's three
    stages (prefill, decode, candidates) summed as the run times them."""
    from persalign.config import load_config
    from persalign.counted_plan import design_of, shape_from_config, stage_work
    from persalign.model_checks import policy_config
    from persalign.planning import GPU_PEAKS, PlanOptions

    config = load_config(str(CONFIG), overrides)
    work = stage_work(config, design_of(config), shape_from_config(policy_config(config.policies[0], config.cache_dir)))
    flops: dict[str, float] = {}
    for stage, value in work.items():
        key = "generation" if stage.startswith("generation") else stage
        flops[key] = flops.get(key, 0.0) + value
    utilisation = PlanOptions().utilisation
    return flops, {s: f / (GPU_PEAKS[gpu] * 1e12 * utilisation) for s, f in flops.items()}, utilisation


def compare(overrides: list[str], gpu: str, out: Path) -> dict:
    with tempfile.TemporaryDirectory(prefix="gpu-check-study-") as tmp:
        wall = run_study(overrides, Path(tmp) / "run", out / "study.log")
        seconds = measured_seconds(Path(tmp) / "run")
    flops, projected, utilisation = planner_gpu_seconds(overrides, gpu)
    stages = []
    for stage, flop in flops.items():
        key = MEASURED_AS.get(stage)
        measured = seconds.get(key) if key else None
        stages.append({"stage": stage, "counted_tflop": flop / 1e12, "planner_gpu_s": projected[stage],
                       "measured_s": measured, "measured_over_planner": measured / projected[stage] if measured and
                       projected[stage] else None})
    training = seconds.get("fit_s", 0.0) + seconds.get("adapt_s", 0.0)
    return {"gpu": gpu, "utilisation": utilisation, "wall_s": wall, "training_s": training, "stages": stages,
            "planner_total_s": sum(projected.values()), "recorded_s": seconds}


def markdown(result: dict) -> list[str]:
    lines = [f"Dry-run study (`configs/scales_dry_run.yaml`) on the GPU: {result['wall_s']:.0f} s wall, of which "
             f"training and adaptation {result['training_s']:.0f} s (the planner does not project training). "
             f"Planner: counted FLOPs ÷ ({result['gpu']} peak × {result['utilisation']:g}).", "",
             "| stage | counted TFLOP | planner GPU s | measured s | measured ÷ planner |", "|---|---|---|---|---|"]
    for row in result["stages"]:
        measured = "in the wall time" if row["measured_s"] is None else f"{row['measured_s']:.2f}"
        ratio = "–" if row["measured_over_planner"] is None else f"{row['measured_over_planner']:.0f}×"
        lines.append(f"| {row['stage']} | {row['counted_tflop']:.4f} | {row['planner_gpu_s']:.4f} | {measured} | {ratio} |")
    lines.append(f"| total | – | {result['planner_total_s']:.3f} | {result['wall_s']:.0f} (wall) | "
                 f"{result['wall_s'] / result['planner_total_s']:.0f}× |")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--gpu", default="h100", help="the planner's GPU column to compare with")
    parser.add_argument("--out", default=".", help="folder of study.log")
    args = parser.parse_args()
    result = compare([f"device={args.device}"], args.gpu, Path(args.out))
    print("\n".join(markdown(result)))
    print(json.dumps(result))


if __name__ == "__main__":
    main()
