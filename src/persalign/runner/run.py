"""`persalign run`: every cell of a config, resumable, then the report.

The planner (runner/plan.py) lists the cells; each policy model is loaded
once; a cell's trained component (reward model or policy-side method) is
provided once per (method, seed) and reused by every deployment of it; the one
evaluator (runner/evaluate.py) runs each cell's deployment through the store.
The per-cell work lives in runner/cells.py, which the Ray backend calls too
(run → ray_backend → cells: no import cycle).

    persalign run demo
    persalign run configs/news_category.yaml -o runs/news seeds=[0,1,2]
"""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path

from persalign.core.config import RunConfig
from persalign.models.numerics import pin_numerics, unpinned
from persalign.runner import provenance
from persalign.runner.cells import (  # noqa: F401  (open_store, run_context: also used from here by tests)
    load_policy,
    need_key,
    open_store,
    policy_context,
    run_context,
    run_planned,
    shared_args_pass,
    trained_providers,
)
from persalign.runner.eta import Progress, planned_work, work_line
from persalign.runner.lock import locked
from persalign.runner.pool_backend import PoolOptions, run_cells_on_pool
from persalign.runner.resolve import ResolvedRun, resolve_run
from persalign.runner.store import RunStore


def run(config: RunConfig | ResolvedRun, out_dir: str | Path, log=print, backend=None) -> RunStore:
    """Every cell of `config` (or of a run already resolved) into `out_dir`, holding the directory's lock (a
    second run is refused).

    `backend` None runs the cells here, one after another; a `pool_backend.PoolOptions` runs them on a local pool
    of single-threaded workers (in this process where it has 1 worker or the device is not the CPU); a
    `ray_backend.RayOptions` runs them as Ray tasks. Every backend reports the same numbers.
    """
    # every check, once, before the run dir (and its lock) is made
    resolved = config if isinstance(config, ResolvedRun) else resolve_run(config)
    late = unpinned(pin_numerics(resolved.config.threads))  # machine-independent numbers: models/numerics.py
    if late:
        log(late)
    with locked(out_dir, log):
        if isinstance(backend, PoolOptions):
            if pooled(resolved.config, backend):
                return run_cells_on_pool(resolved, out_dir, backend, log)
            backend = None
        if backend is not None:
            from persalign.runner.ray_backend import run_cells_on_ray  # Ray is an optional extra

            return run_cells_on_ray(resolved, out_dir, backend, log)
        return _run_cells(resolved, out_dir, log)


def pooled(config: RunConfig, options: PoolOptions) -> bool:
    """Whether the local pool runs the cells: more than one worker, on the CPU (a GPU's cells share its one
    device: they run in this process)."""
    from persalign.models.device import resolve_device

    return options.workers > 1 and resolve_device(config.device).type == "cpu"


def _run_cells(resolved: ResolvedRun, out_dir: str | Path, log) -> RunStore:
    started = time.perf_counter()
    config = resolved.config
    store, cells, todo = open_store(resolved, out_dir, log)
    if not todo:
        return store
    run_ctx = run_context(config, store, log)
    work, stages = planned_work(resolved, run_ctx, todo)
    log(work_line(stages))
    progress = Progress(len(cells), len(cells) - len(todo), log, work)
    providers = trained_providers(config, store)
    for policy in config.policies:
        policy_todo = [p for p in todo if p.cell.policy == policy]
        if policy_todo:
            policy_ctx = policy_context(run_ctx, load_policy(config, policy))
            policy_ctx.args_pass = shared_args_pass(policy_ctx, policy_todo, providers)
            uses = Counter(need_key(p) for p in policy_todo if p.needs)
            for planned in policy_todo:
                run_planned(planned, policy_ctx, providers)
                progress.tick(planned.cell.decoder, planned.cell)
                if planned.needs:  # free a trained component (a LoRA copy of a model) after its last cell
                    uses[need_key(planned)] -= 1
                    if not uses[need_key(planned)]:
                        policy_ctx.trained.pop(need_key(planned), None)
    log(f"finished in {time.perf_counter() - started:.0f} s, peak memory {provenance.peak_memory_mib():.0f} MiB")
    return store
