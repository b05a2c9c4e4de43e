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
import shutil
import socket
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path

from persalign.core.errors import ConfigError, PersalignError
from persalign.models.numerics import KERNELS_ENV
from persalign.runner.trained import trained_dir

SCRATCH_ENV = "PERSALIGN_SCRATCH_DIR"  # where a worker keeps a task's scratch run dir (default: system temp)
TASK_LOG_ENV = "PERSALIGN_TASK_LOG"  # optional: one line per task start / end (which worker ran what)


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


# ---------------------------------------------------------------- worker side

_WORKER_CACHE: dict = {}  # per worker process: the run's data and loaded policies, built once per config


def _cached(key, build):
    if key not in _WORKER_CACHE:
        _WORKER_CACHE[key] = build()
    return _WORKER_CACHE[key]


def _audit(event: str, what: str, scratch: Path) -> None:
    path = os.environ.get(TASK_LOG_ENV)
    if path:
        with open(path, "a", encoding="utf-8") as handle:
            handle.write(f"{event}\t{what}\t{socket.gethostname()}:{os.getpid()}\t{scratch}\n")


@contextmanager
def _scratch_policy(config, planned, run_dir: str, inputs: tuple, kind: str):
    """A policy context over a scratch run dir holding `inputs`; the dir is removed afterwards. Errors
    name the driver's run dir `run_dir`, where the user will look, instead of the scratch dir."""
    from persalign.core.typed_yaml import to_dict
    from persalign.models.numerics import pin_numerics
    from persalign.runner import cells as local

    pin_numerics(config.threads)  # the config's thread count, whatever this task's CPUs
    root = Path(tempfile.mkdtemp(prefix=f"persalign-{kind}-{os.getpid()}-", dir=os.environ.get(SCRATCH_ENV)))
    what = f"{kind} {planned.method_label if kind == 'train' else planned.cell.decoder} seed {planned.cell.seed}"
    _audit("start", what, root)
    try:
        store = local.RunStore(root)
        for files in inputs:
            store.write_files(files)
        key = repr(to_dict(config))
        data = _cached(("run", key), lambda: local.run_context(config, store, print))
        lm = _cached(("policy", key, planned.cell.policy), lambda: local.load_policy(config, planned.cell.policy))
        yield local.policy_context(replace(data, store=store), lm), local.trained_providers(config, store), store
        _audit("end", what, root)
    except PersalignError as error:
        raise PersalignError(str(error).replace(str(root), run_dir)) from None
    finally:
        shutil.rmtree(root, ignore_errors=True)


def train_files(config, planned, run_dir: str, *inputs) -> dict[str, bytes]:
    """Task: fit + adapt the method `planned` needs; its model files."""
    from persalign.runner.cells import provide_trained

    with _scratch_policy(config, planned, run_dir, inputs, "train") as (policy_ctx, providers, store):
        provide_trained(planned, policy_ctx, providers)
        return store.read_files(trained_dir(store, planned).relative_to(store.root))


def cell_files(config, planned, run_dir: str, *inputs) -> dict[str, bytes]:
    """Task: one cell through the one evaluator; the cell's files (and the Best-of-N samples it drew)."""
    from persalign.runner.cells import run_planned

    with _scratch_policy(config, planned, run_dir, inputs, "cell") as (policy_ctx, providers, store):
        run_planned(planned, policy_ctx, providers)
        files = store.read_files(planned.cell.relpath())
        if planned.properties.reranks_samples:
            files.update(store.read_files("samples"))
        return files


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


class _Submitter:
    """Submits train and cell tasks with their dependencies; remembers what each pending ref is."""

    def __init__(self, ray, config, store, options: RayOptions):
        self.config, self.store, self.pending = config, store, {}
        resources = {"num_cpus": options.num_cpus, "num_gpus": options.num_gpus, "max_retries": options.max_retries}
        self.train = ray.remote(**resources)(train_files)
        self.cell = ray.remote(**resources)(cell_files)
        self.models, self.baselines, self.samples = {}, {}, {}

    def model(self, planned):
        """The trained model's files: from the store if complete, else the ref of the one train task."""
        from persalign.runner.cells import need_key

        key = need_key(planned)
        if key not in self.models:
            where = trained_dir(self.store, planned)
            if (where / "head.json").exists():
                self.models[key] = self.store.read_files(where.relative_to(self.store.root))
            else:
                self.models[key] = self.train.remote(self.config, planned, str(self.store.root))
                self.pending[self.models[key]] = ("train", planned)
        return self.models[key]

    def submit(self, planned) -> None:
        inputs = [self.store.read_files(planned.cell.relpath())]  # rows of an interrupted local run resume
        properties = planned.properties
        if planned.needs:
            inputs.append(self.model(planned))
        if properties.compares_with_reference and planned.cell.policy in self.baselines:
            inputs.append(self.baselines[planned.cell.policy])
        chain = (planned.cell.policy, planned.cell.seed)
        if properties.reranks_samples:
            inputs.append(self.samples.get(chain) or self.store.read_files("samples"))
        ref = self.cell.remote(self.config, planned, str(self.store.root), *inputs)
        self.pending[ref] = ("cell", planned)
        if properties.reference_baseline:
            self.baselines.setdefault(planned.cell.policy, ref)
        if properties.reranks_samples:
            self.samples[chain] = ref

    def baseline_from_store(self, planned) -> None:
        if planned.properties.reference_baseline:
            self.baselines.setdefault(planned.cell.policy, self.store.read_files(planned.cell.relpath()))


def _wait_all(ray, submitter: _Submitter, progress, log) -> list[str]:
    """Write each result as it arrives; the failures, one line each."""
    failures = []
    while submitter.pending:
        (ref,), _ = ray.wait(list(submitter.pending), num_returns=1)
        kind, planned = submitter.pending.pop(ref)
        what = planned.method_label if kind == "train" else planned.cell.decoder
        try:
            submitter.store.write_files(ray.get(ref))
        except ray.exceptions.RayError as error:
            failures.append(f"{kind} {what} | {planned.cell.policy} | seed {planned.cell.seed}: "
                            f"{str(error).strip().splitlines()[-1][:300]}")
            log(f"FAILED {failures[-1]}")
            continue
        if kind == "cell":
            log(f"{what} | {planned.cell.policy} | seed {planned.cell.seed}: done")
            progress.tick(what)
    return failures


def run_cells_on_ray(resolved, out_dir, options: RayOptions, log):
    """Every cell of the resolved run (runner/resolve.py) not yet in `out_dir`, as Ray tasks; the store (the
    caller holds its lock)."""
    from persalign.runner.cells import open_store
    from persalign.runner.eta import Progress
    from persalign.runner.provenance import peak_memory_mib

    started = time.perf_counter()
    store, cells, todo = open_store(resolved, out_dir, log)
    if not todo:
        return store
    ray = _connect(options, log)
    submitter = _Submitter(ray, resolved.config, store, options)
    todo_cells = {planned.cell for planned in todo}
    for planned in cells:
        if planned.cell in todo_cells:
            submitter.submit(planned)
        else:
            submitter.baseline_from_store(planned)
    failures = _wait_all(ray, submitter, Progress(len(cells), len(cells) - len(todo), log), log)
    log(f"finished in {time.perf_counter() - started:.0f} s on Ray (driver peak memory {peak_memory_mib():.0f} MiB)")
    if failures:
        raise PersalignError(f"{len(failures)} task(s) failed; every other cell is stored in {store.root}, and "
                             "re-running the same command runs only what is missing:\n  " + "\n  ".join(failures))
    return store
