"""How far a finished run's generation is from what this machine allows (issue #31, point 1, first part).

The floor of a stage is its counted work divided by the rate this machine reaches on the same kind of
work, measured here, in the same process, on the same model (`persalign.planner.machine_rates`: matmul, prefill,
decode, ARGS candidates).

Generation's work per part comes from the run's stored counted work (`counted_work` of every cell:
prompt tokens prefilled, tokens decoded, candidate tokens scored; FLOPs by `persalign.engine.cost.forward_flops`
with the mean prompt length as context); where the run metered less generation work than that (shared
ARGS passes and memos, issue #42: counted work is each cell alone), the floor is scaled to the work done.
Every other stage's work is what the run metered (`persalign.engine.work_meter`: `stage_flops` of each cell,
`features_flops` / `training_flops` of each trained model, `lambda_flops` of each λ choice; runs from
before the meter have none and get no floor); its floor is that work at the prefill rate, the fastest
this machine runs the model (an optimistic floor).

    python benchmarks/bench_floor.py --from-run runs/study-news-full/study_news
    python benchmarks/bench_floor.py --from-run RUN --quick      # shorter rate measurements
    python benchmarks/bench_floor.py --from-run RUN --workers 2  # rates at 1 thread: the run's wall floor on 2 workers

With --workers N the rates are measured on one torch thread, as each pool worker computes, and the output adds
the wall floor on N workers: every stage's floor (stages without one at their measured seconds) over N, as if N
single-threaded workers each ran at the one-thread rate with nothing waiting. No schedule of this run's work on
N such workers can finish sooner than that at these rates.
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path

import torch
from common import count, emit, run_folder, machine

from persalign.engine.cost import ModelShape, forward_flops
from persalign.planner.machine_rates import measure_rates

TRAINING = "training + adaptation"


def run_work(run_dir: Path) -> dict:
    """Counted generation work by part (FLOPs) and every stage's measured seconds, summed over cells."""
    tokens, shape = Counter(), None
    for path in sorted(run_dir.glob("cells/*/*/*/metrics.json")):
        metrics = json.loads(path.read_text())
        work = metrics.get("counted_work") or {}
        policy = (work.get("models") or {}).get("policy")
        shape = ModelShape(**policy) if policy and shape is None else shape
        for key in ("prefill_tokens", "decode_tokens", "candidate_tokens", "reward_tokens", "outputs"):
            tokens[key] += work.get(key) or 0
    context = tokens["prefill_tokens"] / max(1, tokens["outputs"])
    body = ModelShape(shape.body_params, 0.0, shape.layers, shape.width)
    flops = {"prefill": tokens["outputs"] * forward_flops(shape, round(context), 0, 1),
             "decode": tokens["decode_tokens"] * forward_flops(shape, 1, round(context), 1),
             "candidates": tokens["candidate_tokens"] * forward_flops(body, 1, round(context))}
    return {"tokens": dict(tokens), "mean_prompt_tokens": context, "flops": flops, "seconds": stage_seconds(run_dir)}


def metered_flops(run_dir: Path) -> dict[str, float]:
    """FLOPs the run metered per stage (names as the report's cost table); empty for runs without a meter."""
    from persalign.report.markdown import distinct_trainings

    totals: Counter = Counter()
    cells = [json.loads(path.read_text()) for path in sorted(run_dir.glob("cells/*/*/*/metrics.json"))]
    for metrics in cells:
        for field in ("stage_flops", "stage_shared_flops"):  # the cell's own work and the shared work it did
            for key, value in (metrics.get(field) or {}).items():
                totals[key.removesuffix("_shared_flops").removesuffix("_flops")] += value
        settings = metrics.get("settings") or {}
        totals["λ choice"] += (settings.get("lambda_flops") or 0.0) + (settings.get("lambda_shared_flops") or 0.0)
    for training in distinct_trainings([m.get("settings") for m in cells], [m.get("seed") for m in cells]):
        totals["features"] += training.get("features_flops") or 0.0  # each trained model once (ARGS + Best-of-N)
        totals[TRAINING] += training.get("training_flops") or 0.0  # fit and adaptation, metered together
    return {k: v for k, v in totals.items() if v}


def stage_seconds(run_dir: Path) -> dict[str, float]:
    """Seconds per stage as the report's cost table sums them, with training and adaptation as one stage:
    their work is metered as one (`training_flops`), so their seconds are set against it together."""
    from persalign.report.markdown import results_frame, stage_totals
    from persalign.runner.store import RunStore

    seconds = dict(stage_totals(results_frame(RunStore(run_dir))))
    if "training" in seconds or "adaptation" in seconds:
        seconds[TRAINING] = seconds.pop("training", 0.0) + seconds.pop("adaptation", 0.0)
    return seconds


def floor_report(run_dir: Path, reps: int = 5) -> dict:
    """Measure this machine's rates, then print and return seconds ÷ floor per stage of `run_dir`."""
    torch.manual_seed(0)
    measured = measure_rates(reps)
    work = run_work(run_dir)
    rates = measured["gflop_per_s"]
    counted_floor = {part: flops / (rates[part] * 1e9) for part, flops in work["flops"].items()}
    generation_s, metered = work["seconds"].get("generation", 0.0), metered_flops(run_dir)
    print("machine rates (GFLOP/s): " + ", ".join(f"{k} {v:.1f}" for k, v in rates.items()))
    print("generation work (GFLOP): " + ", ".join(f"{k} {v / 1e9:.0f}" for k, v in work["flops"].items())
          + " (counted: each cell alone)")
    print("generation floor (s):    " + ", ".join(f"{k} {v:.0f}" for k, v in counted_floor.items())
          + f"; total {sum(counted_floor.values()):.0f}")
    done = done_share(sum(work["flops"].values()), metered.get("generation", 0.0))
    floor = sum(counted_floor.values()) * done
    if done < 1:
        print(f"generation done:         {metered['generation'] / 1e9:.0f} GFLOP metered = {done:.0%} of the counted "
              f"work (shared ARGS passes, memos); floor of the work done {floor:.0f} s (the counted mix of parts)")
    print(f"generation measured:     {generation_s:.0f} s = {generation_s / floor:.2f} × floor")
    stages = other_stages(work["seconds"], metered, rates["prefill"])
    floored = generation_s + sum(s["seconds"] for s in stages.values() if s["floor_s"])
    whole = floored / (floor + sum(s["floor_s"] or 0 for s in stages.values()))
    print(f"stages with a floor:     {floored:.0f} s of {sum(work['seconds'].values()):.0f} s = {whole:.2f} × floor")
    return {**measured, **work, "generation_floor_s": counted_floor, "generation_done_share": done,
            "generation_over_floor": generation_s / floor, "stages": stages, "whole_over_floor": whole,
            "whole_floor_s": whole_floor_seconds(floor, stages)}


def whole_floor_seconds(generation_floor: float, stages: dict) -> float:
    """Seconds of the whole run at the floor: generation's and every metered stage's floor, and the stages
    nothing meters (metrics, prompts) at the seconds they took."""
    return generation_floor + sum(stage["floor_s"] or stage["seconds"] for stage in stages.values())


def wall_floor(report: dict, workers: int) -> dict:
    """The run's floor spread evenly over `workers` single-threaded workers (rates measured on one thread)."""
    minutes = report["whole_floor_s"] / workers / 60
    print(f"wall floor on {workers} single-threaded workers: {report['whole_floor_s']:.0f} s of work at the "
          f"one-thread rates / {workers} = {minutes:.1f} min")
    return {"workers": workers, "wall_floor_min": minutes}


def done_share(counted: float, metered: float) -> float:
    """The share of generation's counted work (each cell alone) that the run did. The meter counts padding
    too, so it reads above the count where nothing was shared: then 1. Shared ARGS passes and memos (issue
    #42) do less than the cells' counted work; the floor is then set on what was done, assuming the work done
    has the counted mix of prefill, decode and candidates (the meter sums them)."""
    return min(1.0, metered / counted) if metered and counted else 1.0


def other_stages(seconds: dict, metered: dict, prefill_rate: float) -> dict:
    """Every stage but generation: its seconds, metered work and ÷ floor (None where nothing was metered)."""
    stages = {}
    for name, spent in seconds.items():
        if name == "generation":
            continue
        floor = metered[name] / (prefill_rate * 1e9) if metered.get(name) else None
        stages[name] = {"seconds": spent, "metered_gflop": metered.get(name, 0.0) / 1e9, "floor_s": floor,
                        "over_floor": spent / floor if floor else None}
        print(f"{name:<24} {spent:8.0f} s  " + (f"{spent / floor:.1f} × floor ({floor:.1f} s)" if floor
                                                 else "not metered"))
    return stages


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--from-run", required=True, type=run_folder,
                        help="a finished run directory (RUN_DIR with cells/)")
    parser.add_argument("--quick", action="store_true", help="1 timed repetition per rate instead of 5")
    parser.add_argument("--workers", type=count, help="measure the rates on one thread and print the run's wall floor "
                        "on this many single-threaded workers")
    args = parser.parse_args()
    if args.workers:
        torch.set_num_threads(1)
    report = floor_report(Path(args.from_run), 1 if args.quick else 5)
    extra = wall_floor(report, args.workers) if args.workers else {}
    emit({"benchmark": "floor", "machine": machine(), "run_dir": args.from_run, **report, **extra})


if __name__ == "__main__":
    main()
