"""The tasks every multi-process backend runs (the local pool, runner/pool_backend.py, and Ray): each works in a
scratch run directory on its worker, seeded with the files it depends on, and returns the files it made.

`train_files` fits and adapts one method for one seed; `cell_files` runs one planned cell through the one
evaluator. A policy's ARGS cells share one pass (runner/args_pass.py), split in tasks that run side by side:
`args_validation_files` decodes a share of the λ choice's validation prompts for every member and λ at once,
`args_lambdas_files` chooses every member's λ from them, `args_batches_files` decodes a share of the query batches for
every member at once, and `args_members_files` runs members through the evaluator on the stored batches. The
pass stays shared work done once, its rows the in-process run's. A worker keeps the run's data and each
policy it loaded between tasks (one config per worker process).

    persalign run demo --workers 2   # these tasks on a local pool of two single-threaded workers
"""

from __future__ import annotations

import os
import shutil
import socket
import tempfile
import time
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

from persalign.core.errors import PersalignError
from persalign.runner.trained import trained_dir

SCRATCH_ENV = "PERSALIGN_SCRATCH_DIR"  # where a worker keeps a task's scratch run dir (default: system temp)
TASK_LOG_ENV = "PERSALIGN_TASK_LOG"  # optional: one line per task start / end (which worker ran what, and when)
IN_PLACE_ENV = "PERSALIGN_TASKS_IN_PLACE"  # set in the local pool's workers: tasks work in the run dir itself


def in_place() -> bool:
    """Whether this worker shares the driver's file system (the local pool): a task then reads and writes the run
    dir as the in-process run does (batches of an interrupted cell kept, lines naming the run's own files) and
    returns nothing; elsewhere (Ray) it works in a scratch copy and returns the files it made."""
    return os.environ.get(IN_PLACE_ENV) == "1"

_WORKER_CACHE: dict = {}  # per worker process: the run's data and loaded policies, built once per config


def _cached(key, build):
    if key not in _WORKER_CACHE:
        _WORKER_CACHE[key] = build()
    return _WORKER_CACHE[key]


def _audit(event: str, what: str, scratch: Path) -> None:
    path = os.environ.get(TASK_LOG_ENV)
    if path:
        with open(path, "a", encoding="utf-8") as handle:
            handle.write(f"{event}\t{what}\t{socket.gethostname()}:{os.getpid()}\t{scratch}\t{time.time():.3f}\n")


@contextmanager
def scratch_policy(config, planned, run_dir: str, inputs: tuple, what: str):
    """A policy context over a scratch run dir holding `inputs`, removed afterwards (errors name the driver's run
    dir `run_dir`, where the user will look, instead of the scratch dir); or over `run_dir` itself `in_place()`."""
    from persalign.core.typed_yaml import to_dict
    from persalign.models.numerics import pin_numerics
    from persalign.runner import cells as local

    pin_numerics(config.threads)  # the config's thread count, whatever this task's CPUs
    kind = what.split()[0]
    shared = in_place()
    root = Path(run_dir) if shared else Path(tempfile.mkdtemp(prefix=f"persalign-{kind}-{os.getpid()}-",
                                                              dir=os.environ.get(SCRATCH_ENV)))
    _audit("start", what, root)
    try:
        store = local.RunStore(root)
        for files in [] if shared else inputs:
            store.write_files(files)
        key = repr(to_dict(config))
        data = _cached(("run", key), lambda: local.run_context(config, store, print))
        lm = _cached(("policy", key, planned.cell.policy), lambda: local.load_policy(config, planned.cell.policy))
        yield local.policy_context(replace(data, store=store), lm), local.trained_providers(config, store), store
        _audit("end", what, root)
    except PersalignError as error:
        raise PersalignError(str(error).replace(str(root), run_dir)) from None
    finally:
        if not shared:
            shutil.rmtree(root, ignore_errors=True)


def _made(store, *relatives) -> dict[str, bytes]:
    """The files a task made, for the driver to write; none where the task wrote the run dir itself."""
    files: dict[str, bytes] = {}
    for relative in [] if in_place() else relatives:
        files.update(store.read_files(relative))
    return files


def train_files(config, planned, run_dir: str, *inputs) -> dict[str, bytes]:
    """Task: fit + adapt the method `planned` needs; its model files."""
    from persalign.runner.cells import provide_trained

    what = f"train {planned.method_label} seed {planned.cell.seed}"
    with scratch_policy(config, planned, run_dir, inputs, what) as (policy_ctx, providers, store):
        provide_trained(planned, policy_ctx, providers)
        return _made(store, trained_dir(store, planned).relative_to(store.root))


def cell_files(config, planned, run_dir: str, *inputs) -> dict[str, bytes]:
    """Task: one cell through the one evaluator; the cell's files (and the Best-of-N samples it drew)."""
    from persalign.runner.cells import run_planned

    what = f"cell {planned.cell.decoder} seed {planned.cell.seed}"
    with scratch_policy(config, planned, run_dir, inputs, what) as (policy_ctx, providers, store):
        run_planned(planned, policy_ctx, providers)
        return _made(store, planned.cell.relpath(), *(["samples"] if planned.properties.reranks_samples else []))


@contextmanager
def _pass(config, members: list, run_dir: str, inputs: tuple, what: str):
    """A policy context whose shared ARGS pass has `members` (runner/args_pass.py), the providers and the store."""
    from persalign.runner.cells import shared_args_pass

    with scratch_policy(config, members[0], run_dir, inputs, what) as (policy_ctx, providers, store):
        policy_ctx.args_pass = shared_args_pass(policy_ctx, members, providers)
        yield policy_ctx, providers, store


def args_validation_files(config, work: tuple, run_dir: str, *inputs) -> dict[str, bytes]:
    """Task: groups `part`, `part + parts`, ... of the λ choice's validation prompts, decoded for every member
    and nonzero λ as rows of shared passes and stored (RUN_DIR/args_pass/POLICY), as `args_lambdas_files`
    decodes them in-process: the same rows in the same passes, so the same tokens."""
    members, part, parts = work
    what = f"args_validation {members[0].cell.policy} part {part + 1} of {parts}"
    with _pass(config, members, run_dir, inputs, what) as (policy_ctx, _, store):
        shared = policy_ctx.args_pass
        if shared is not None:
            shared.decode_validation(part, parts)
        return _made(store, *([] if shared is None else [shared.folder.relative_to(store.root)]))


def args_lambdas_files(config, members: list, run_dir: str, *inputs) -> dict[str, bytes]:
    """Task: the λ of every member of a policy's shared pass, from their validation decodes (stored by
    `args_validation_files`; any missing group decoded here); each member's lambda.json."""
    what = f"args_lambdas {members[0].cell.policy} ({len(members)} cells)"
    with _pass(config, members, run_dir, inputs, what) as (policy_ctx, _, store):
        if policy_ctx.args_pass is not None:
            policy_ctx.args_pass.choose_lambdas()
        return _made(store, *[p.cell.relpath() for p in members])


def args_batches_files(config, work: tuple, run_dir: str, *inputs) -> dict[str, bytes]:
    """Task: query batches `part`, `part + parts`, ... of a policy's shared pass, every member's rows decoded
    together and stored (RUN_DIR/args_pass/POLICY), as the first member to reach each batch decodes them
    in-process: the same rows in the same passes, so the same tokens."""
    from persalign.core.registry import DECODERS
    from persalign.runner.evaluate import cell_batches

    members, part, parts = work
    what = f"args_batches {members[0].cell.policy} part {part + 1} of {parts}"
    with _pass(config, members, run_dir, inputs, what) as (policy_ctx, _, store):
        shared = policy_ctx.args_pass
        cell = next(iter(shared.members()), None) if shared is not None else None
        if cell is not None:  # every member batches the same plain prompts the same way
            ctx = shared.context(cell)
            deployment = DECODERS.get(shared.planned[cell].decoder)(ctx)
            for batch in cell_batches(deployment, ctx)[part::parts]:
                shared.stored_batch(deployment.prepare(batch))
        return _made(store, *([] if shared is None else [shared.folder.relative_to(store.root)]))


def args_members_files(config, work: tuple, run_dir: str, *inputs) -> dict[str, bytes]:
    """Task: ARGS cells of a policy's shared pass through the one evaluator, one after another as in-process,
    their outputs read from the pass's stored batches (a member the pass does not take, a token-level RM,
    decodes alone); the cells' files."""
    from persalign.runner.cells import run_planned

    members, group = work
    what = f"args_members {members[0].cell.policy} ({len(group)} cells{seeds_label(group)})"
    with _pass(config, members, run_dir, inputs, what) as (policy_ctx, providers, store):
        for planned in group:
            run_planned(planned, policy_ctx, providers)
        return _made(store, *[p.cell.relpath() for p in group])


def seeds_label(group: list) -> str:
    seeds = sorted({p.cell.seed for p in group})
    return f", seed {seeds[0]}" if len(seeds) == 1 else ""
