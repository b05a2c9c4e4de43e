"""Runs on Ray: the planner's cells as Ray tasks; the driver's run store stays the one source of truth.

Two kinds of task. A `train` task fits and adapts one method for one seed and
returns its model files; a `cell` task runs one planned cell through the one
evaluator in a scratch run directory on the worker, seeded with the files the
cell depends on, and returns the cell's files. Dependencies are Ray object
refs passed as task arguments, so Ray starts a task only when they exist: a
deployment waits for the trained model it uses (trained once, whatever the
number of policies and deployments using it), ARGS for the reference
baseline's outputs (its win rate), a Best-of-N cell for the samples the
previous one of its policy × seed drew. Workers need no shared file system:
the driver writes what each task returns, atomically, completion markers last
(`RunStore.write_files`), as results arrive. Re-running skips finished cells
and trained models exactly as the local backend does; a worker that dies is
retried (`max_retries`); a cell that fails for good is reported with its
error after every other cell's results are written.

    persalign run demo --backend ray                       # a local Ray instance on this machine
    persalign study configs/study_news.yaml --backend ray --address auto --num-gpus 0.25
"""

from __future__ import annotations

import math
import os
import socket
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from persalign.core.errors import ConfigError, PersalignError
from persalign.models.numerics import KERNELS_ENV
from persalign.runner.tasks import SCRATCH_ENV, TASK_LOG_ENV


@dataclass(frozen=True)
class RayOptions:
    address: str | None = None  # None: start a local Ray instance; "auto" or HOST:PORT: join a cluster
    num_cpus: float = 1.0  # per task
    num_gpus: float = 0.0  # per task; fractional to let several small-model cells share a GPU
    max_retries: int = 2  # retries of a task whose worker died (node lost, killed, out of memory)

    def __post_init__(self):
        for flag, value in (("--num-cpus", self.num_cpus), ("--num-gpus", self.num_gpus),
                            ("--max-retries", self.max_retries)):
            if not 0 <= value < math.inf:
                raise ConfigError(f"{flag}: {value} is not allowed (must be a finite number >= 0)")
        if self.num_cpus == 0 and self.num_gpus == 0:
            raise ConfigError("--num-cpus 0 with --num-gpus 0: a task must ask for some CPU or GPU")


CONNECT_TIMEOUT_S = 10.0


RAY_ADDRESS_FILE = Path(tempfile.gettempdir()) / "ray" / "ray_current_cluster"


def resolve_auto(address: str | None) -> str | None:
    """What Ray itself would join for "auto": $RAY_ADDRESS, else the address file a local `ray start` left.
    None (no cluster recorded) lets ray.init say so at once; a recorded but dead cluster is then caught by
    check_reachable instead of making ray.init wait on it."""
    if address != "auto":
        return address
    recorded = os.environ.get("RAY_ADDRESS", "").strip()
    if not recorded and RAY_ADDRESS_FILE.is_file():
        recorded = RAY_ADDRESS_FILE.read_text(errors="replace").strip()
    return recorded if recorded and recorded != "auto" else None


def check_reachable(address: str | None, timeout_s: float = CONNECT_TIMEOUT_S) -> None:
    """Fail in seconds, not never, when HOST:PORT does not answer (ray.init would wait on it)."""
    given, address = address, resolve_auto(address)
    if not address or "://" in address:
        return
    shown = address if given == address else f"{given} (= {address})"
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise ConfigError(f"--address {shown!r}: give auto or HOST:PORT")
    try:
        socket.create_connection((host, int(port)), timeout=timeout_s).close()
    except OSError as error:
        raise PersalignError(f"--address {shown}: no Ray cluster answers there within {timeout_s:.0f} s "
                             f"({error.strerror or error}); start one (ray start --head) or fix the address") from None


def check_resources(nodes: list[dict], options: RayOptions) -> None:
    """A task asking for more than any node has would wait forever: refuse it before submitting."""
    alive = [n.get("Resources", {}) for n in nodes if n.get("Alive", True)]
    for flag, key, wanted in (("--num-cpus", "CPU", options.num_cpus), ("--num-gpus", "GPU", options.num_gpus)):
        most = max((r.get(key, 0.0) for r in alive), default=0.0)
        if wanted > most:
            raise PersalignError(f"{flag} {wanted:g}: no node of the Ray cluster has that many "
                                 f"({key} per node at most {most:g}); ask for fewer")


# ---------------------------------------------------------------- driver side


def _connect(options: RayOptions, log):
    try:
        import ray
    except ImportError:
        raise PersalignError("--backend ray needs Ray: pip install 'persalign[ray]'") from None
    if not ray.is_initialized():
        env = {"TQDM_DISABLE": "1"}  # progress bars of every worker would flood the driver's log
        env.update({k: os.environ[k] for k in (SCRATCH_ENV, TASK_LOG_ENV, "PERSALIGN_CACHE", KERNELS_ENV)
                    if k in os.environ})
        check_reachable(options.address)
        try:
            ray.init(address=options.address, runtime_env={"env_vars": env}, log_to_driver=False,
                     include_dashboard=False)
        except (ConnectionError, RuntimeError, ValueError) as error:
            raise PersalignError(f"--address {options.address or '(local)'}: Ray could not start or join a "
                                 f"cluster ({str(error).splitlines()[0][:200]})") from None
    check_resources(ray.nodes(), options)
    log(f"ray: {ray.cluster_resources()}")
    return ray


class _RayTasks:
    """Ray as runner/task_graph.py's backend: remote functions, object refs, ray.wait / ray.get."""

    def __init__(self, ray, options: RayOptions):
        self.ray, self.errors = ray, (ray.exceptions.RayError,)
        self.resources = {"num_cpus": options.num_cpus, "num_gpus": options.num_gpus,
                          "max_retries": options.max_retries}

    def remote(self, fn, priority: int = 0, heavy: bool = False):  # Ray's scheduler orders and places tasks itself
        return self.ray.remote(**self.resources)(fn)

    def wait_one(self, refs: list):
        (ref,), _ = self.ray.wait(refs, num_returns=1)
        return ref

    def get(self, ref):
        return self.ray.get(ref)


def run_cells_on_ray(resolved, out_dir, options: RayOptions, log):
    """Every cell of the resolved run (runner/resolve.py) not yet in `out_dir`, as Ray tasks; the store (the
    caller holds its lock)."""
    from persalign.runner.cells import open_store
    from persalign.runner.eta import Progress
    from persalign.runner.provenance import peak_memory_mib
    from persalign.runner.task_graph import Submitter, submit_all, wait_all

    started = time.perf_counter()
    store, cells, todo = open_store(resolved, out_dir, log)
    if not todo:
        return store
    ray = _connect(options, log)
    submitter = Submitter(_RayTasks(ray, options), resolved.config, store)
    submit_all(submitter, cells, todo)
    failures = wait_all(submitter, Progress(len(cells), len(cells) - len(todo), log), log)
    log(f"finished in {time.perf_counter() - started:.0f} s on Ray (driver peak memory {peak_memory_mib():.0f} MiB)")
    if failures:
        raise PersalignError(f"{len(failures)} task(s) failed; every other cell is stored in {store.root}, and "
                             "re-running the same command runs only what is missing:\n  " + "\n  ".join(failures))
    return store
