"""The progress line after each cell, with an ETA from counted work (issue #43).

Before the first cell, every cell still to run gets its counted FLOPs from the cost model `persalign plan`
uses (counted_plan.stage_work: features, λ choice, generation, scoring; an upper bound, outputs of
max_new_tokens). A cell's share is the planner's work of the cells up to it minus that of the cells before
it, so work done once for many cells (the frozen backbone's features, the query pairs' log-probs, Best-of-N
samples) falls on the first cell that needs it. After each cell: work left ÷ the rate the run reached so
far (counted work done ÷ seconds). A mean cell time, the old estimate, promised 47 minutes after the
baselines for reward cells whose feature pass alone then took longer; counted work knows those cells are
heavier. Training is not counted (a head's cost depends on its epochs), so it slows the measured rate.

    persalign run demo -o runs/demo   # "progress 3/11 cells (…); … ETA 4.2 min: 1.9 TFLOP …"
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import replace

from persalign.runner.plan import PlannedCell


def cells_work(config, design, shape, planned: list[PlannedCell]) -> tuple[list[float], dict[str, float]]:
    """(each cell's counted FLOPs, in the order given; the work of all of them per stage)."""
    from persalign.runner.counted_plan import cell_key, stage_work

    out, before, seen, stages = [], 0.0, Counter(), {}
    for cell in planned:
        seen[cell_key(cell)] += 1
        stages = stage_work(config, replace(design, cells=Counter(seen)), shape)
        out.append(sum(stages.values()) - before)
        before = sum(stages.values())
    return out, stages


def planned_work(resolved, run_ctx, todo: list[PlannedCell]) -> tuple[dict, dict[str, float]]:
    """({cell: counted FLOPs} of every cell to run, policy by policy; their work per stage, summed), from the
    resolved run's cells and model configs (runner/resolve.py) and the run's data."""
    from persalign.runner.counted_plan import design_from, shape_from_config

    config, work, stages = resolved.config, {}, Counter()
    for policy in config.policies:
        cells = [p for p in todo if p.cell.policy == policy]
        if cells:
            design = design_from(config, run_ctx.dataset, run_ctx.split, policy, resolved.cells_of(policy))
            flops, by_stage = cells_work(config, design, shape_from_config(resolved.model_configs[policy]), cells)
            work.update({p.cell: f for p, f in zip(cells, flops)})
            stages.update(by_stage)
    return work, dict(stages)


def work_line(stages: dict[str, float]) -> str:
    parts = ", ".join(f"{stage} {flops / 1e12:.3g}" for stage, flops in stages.items() if flops)
    return f"counted work to run (TFLOP, an upper bound; training, RL tuning and judging not counted): {parts}"


class Progress:
    """Cells done out of the whole sweep, with an ETA: the counted work left at the rate reached so far where
    each cell's work is known (local runs), else (Ray: cells overlap) the mean cell time so far."""

    def __init__(self, total: int, already_done: int, log, work: dict | None = None):
        self.total, self.done, self.log = total, already_done, log
        self.started, self.run_now = time.perf_counter(), 0
        self.work, self.left, self.work_done = work, sum((work or {}).values()), 0.0

    def tick(self, what: str, cell=None) -> None:
        elapsed = time.perf_counter() - self.started
        self.done, self.run_now = self.done + 1, self.run_now + 1
        if self.work and cell in self.work:
            self.left, self.work_done = self.left - self.work[cell], self.work_done + self.work[cell]
            rate = self.work_done / max(elapsed, 1e-9)
            eta = (f"ETA {self.left / rate / 60:.1f} min: {self.left / 1e12:.3g} TFLOP of counted work left at "
                   f"{rate / 1e9:.3g} GFLOP/s, the rate so far")
        else:
            eta = f"ETA {elapsed / self.run_now * (self.total - self.done) / 60:.1f} min (mean cell time so far)"
        self.log(f"progress {self.done}/{self.total} cells ({what}); elapsed {elapsed / 60:.1f} min, {eta}")
