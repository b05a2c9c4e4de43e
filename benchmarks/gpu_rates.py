"""A GPU's measured rates, in the planner's units: counted GFLOP/s of each kind of work (issue #55).

`persalign plan` projects a GPU as counted FLOPs ÷ (peak × utilisation). On an H200 that column was 70–286×
optimistic (docs/scale-out.md): at these batch sizes a decode step costs a near-constant time (kernel launches,
Python), not its FLOPs. This script turns one timing run of `bench_gpu.py` (alone, or step 3 of
`gpu_check.py`) into what the planner can use instead: for each architecture and batch size, the work
persalign's cost model (persalign/engine/cost.py) counts for each timed stage — on the very token ids the benchmark
decoded (bench_gpu.bench_inputs) — divided by the seconds it took:

- decode     = greedy's counted FLOPs ÷ greedy's seconds (its one prefill included: 1 forward in 25);
- candidates = ARGS's (k candidates a step through the 0.5B RM, the policy's decode) ÷ ARGS's seconds;
- prefill    = policy-accuracy scoring's (whole prompt + response forwards) ÷ scoring's seconds;
- candidates_graphed = the same ARGS work ÷ the graphed step's seconds (`args_graph`; where it was timed
  and did not fail): what a run with `args.cuda_graph` and an RM on its own backbone decodes at.

`persalign plan CONFIG --gpu-rates FILE` then divides each stage's counted work by the rate of its kind at the
nearest measured architecture and the run's batch size (log-interpolated between measured batch sizes).

    python benchmarks/gpu_rates.py gpu-check/gpu_check.json -o gpu-check/gpu_rates.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from bench_gpu import ARCHITECTURES, bench_inputs, prompts_at
from common import existing_file

from persalign.engine.cost import args_work, forward_flops, greedy_work
from persalign.runner.counted_plan import NO_HEAD, shape_from_config

KINDS = {"decode": "greedy", "candidates": "args", "prefill": "scoring"}  # rate kind -> the stage it is read from
GRAPHED = {"candidates_graphed": "args_graph"}  # read where the timing has the stage (runs from 2026-11-27 on)


def stage_flops(stage: str, shapes: dict, prompts: list, inputs: dict, timing: dict) -> float:
    """Counted FLOPs of one timed stage over `prompts` (outputs of the mean length the stage produced)."""
    new, k, policy = timing["max_new_tokens"], timing["k"], shapes["policy"]
    if stage == "scoring":
        responses = inputs["responses"]
        pairs = zip(prompts, responses[: len(prompts)], responses[len(prompts): 2 * len(prompts)])
        return sum(forward_flops(policy, len(p) + len(c)) + forward_flops(policy, len(p) + len(r)) for p, c, r in pairs)
    generated = round(shapes["tokens"][stage] / len(prompts))
    if stage in ("args", "args_graph"):
        work = {"policy": policy, "reward": shapes["reward"], "head": NO_HEAD}
        return sum(args_work(work, len(p), generated, new, k, False).flops for p in prompts)
    return sum(greedy_work(policy, len(p), generated, new).flops for p in prompts)


def architecture_rates(arch: str, measured: dict, timing: dict) -> dict:
    """{batch: {kind: GFLOP/s}} of one architecture's timing, and its body parameters (what plans match on)."""
    inputs = bench_inputs(arch, timing.get("max_prompts", 64))
    policy, reward = (shape_from_config(ARCHITECTURES[a]()) for a in (arch, inputs["rm_arch"]))
    batches = {}
    for key in (k for k in measured if k.startswith("batch")):
        batch = int(key[len("batch"):])
        prompts = prompts_at(inputs["prompts"], batch, timing.get("batch1_prompts", 4))
        row = measured[key]
        kinds = {**KINDS, **{k: s for k, s in GRAPHED.items() if "seconds" in row.get(s, {})}}
        shapes = {"policy": policy, "reward": reward, "tokens": {s: row[s]["tokens"] for s in kinds.values()}}
        batches[str(batch)] = {kind: stage_flops(stage, shapes, prompts, inputs, timing) / row[stage]["seconds"] / 1e9
                               for kind, stage in kinds.items()}
    return {"body_params": policy.body_params, "batches": batches}


def rates_from(timing: dict) -> dict:
    """The rates file `persalign plan --gpu-rates` reads, from a bench_gpu.py result."""
    device = (timing.get("machine") or {}).get("cuda") or "cpu"
    return {"device": device, "dtype": timing["dtype"], "max_new_tokens": timing["max_new_tokens"],
            "architectures": {arch: architecture_rates(arch, out, timing) for arch, out in timing["results"].items()}}


def main() -> None:
    parse = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parse.add_argument("timing", type=existing_file, help="gpu_check.json (its timing step) or a bench_gpu.py result")
    parse.add_argument("-o", "--out", required=True, help="where the rates file is written")
    args = parse.parse_args()
    record = json.loads(Path(args.timing).read_text())
    rates = rates_from(record.get("timing", record))
    Path(args.out).write_text(json.dumps(rates, indent=1) + "\n")
    for arch, entry in rates["architectures"].items():
        for batch, kinds in entry["batches"].items():
            print(f"{arch} batch {batch}: " + ", ".join(f"{k} {v:,.0f} GFLOP/s" for k, v in kinds.items()))


if __name__ == "__main__":
    main()
