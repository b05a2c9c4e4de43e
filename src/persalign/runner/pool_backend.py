"""The local pool: a run's cells on every core of this machine, as single-threaded worker processes.

persalign computes with one torch thread per process (models/numerics.py: the numbers must not depend on the
thread count), so more cores are used by running tasks side by side: the task graph of runner/task_graph.py on
a pool of `workers` spawned processes. Each task is the same function, on the same inputs, as in-process (a
policy's ARGS cells stay rows of one shared pass; the first reward head fills the features cache before the
others start), so every number is the same at 1, 2 or N workers and on Ray. Each worker keeps the run's data and
its policy between tasks; the workers' output goes to RUN_DIR/logs/workers-N.log (N counts the pool's starts: 1
unless a worker died).

Workers share the run dir and write it as the in-process run does (cells' batches as they finish), so an
interrupted cell keeps its batches and every line names the run's own files; a task's error stops the run with
the in-process run's one line. A worker that dies (killed, out of memory) breaks the pool: it is started again
and the tasks that were running are retried (`max_retries`). Ctrl-C / SIGTERM of the driver kills every worker
before it unwinds, and a worker whose driver dies (SIGKILL) is killed by the kernel (PR_SET_PDEATHSIG): no
orphan keeps computing. Re-running resumes, with any worker count.

    persalign run demo --workers 2
"""

from __future__ import annotations

import ctypes
import gc
import multiprocessing
import os
import signal
import time
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from pathlib import Path

from persalign.core.errors import ConfigError, PersalignError
from persalign.runner.tasks import IN_PLACE_ENV

PR_SET_PDEATHSIG = 1


WORKERS_ENV = "PERSALIGN_WORKERS"  # the default worker count where --workers is not given (the tests set 1)


def default_workers() -> int:
    """PERSALIGN_WORKERS where set (a whole number >= 1), else one worker per core this process may use."""
    text = os.environ.get(WORKERS_ENV, "").strip()
    if not text:
        return available_cores()
    if not text.isdigit() or int(text) < 1:
        raise ConfigError(f"{WORKERS_ENV}={text!r}: give a whole number of at least 1")
    return int(text)


def available_cores() -> int:
    """The cores this process may run on (its affinity mask; a container's CPU set), at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


@dataclass(frozen=True)
class PoolOptions:
    workers: int  # processes side by side, one torch thread each (the config's `threads`)
    max_retries: int = 2  # retries of a task whose worker died
    heavy_at_once: int | None = None  # memory-heavy tasks side by side at most (None: `default_heavy_at_once`)

    def __post_init__(self):
        if not isinstance(self.workers, int) or self.workers < 1:
            raise ConfigError(f"--workers {self.workers!r}: give a whole number of at least 1 (0 on the command "
                              "line: one per core)")
        if self.heavy_at_once is None:
            object.__setattr__(self, "heavy_at_once", default_heavy_at_once(self.workers))
        if not isinstance(self.heavy_at_once, int) or self.heavy_at_once < 1:
            raise ConfigError(f"--heavy-at-once {self.heavy_at_once!r}: give a whole number of at least 1")


def default_heavy_at_once(workers: int) -> int:
    """Memory-heavy tasks (task_graph's `heavy_cell`, METHODS' `heavy_training`, the λ choice's validation passes)
    on at most half the workers, rounded up: on 2 workers one, so no two of the full news study's 1.6-2.4 GiB
    tasks meet. That study's whole run under this rule (2026-11-29, docs/scale-out.md) peaked at 4,077 MiB PSS,
    against 4,699 in the run before (one heavy fit at a time, these cells light, GenARM's larger scoring blocks);
    projected from its task log (benchmarks/project_workers.py): 120.4 / 83.4 / 70.9 / 54.9 min on 2 / 3 / 4 / 8
    workers."""
    return max(1, (workers + 1) // 2)


def _start_worker(log_path: str, driver: int) -> None:
    """Each worker: its progress lines to the pool's log (its warnings stay on the terminal's stderr, as an
    in-process run's), the run dir worked in place, Ctrl-C left to the driver, and killed with its driver."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):  # not Linux: the driver's own clean-up still kills its workers
        pass
    if os.getppid() != driver:  # the driver died before the line above took effect
        os._exit(1)
    log = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(log, 1)
    os.environ.update({"TQDM_DISABLE": "1", IN_PLACE_ENV: "1"})
    from persalign.models.numerics import pin_kernels

    pin_kernels()


def run_task(fn, *args):
    """A task in a worker, then the heap it freed given back to the system. glibc keeps freed small blocks in the
    process: a worker that had trained GenARM went on holding ~1.7 GiB through the light head trainings that
    followed (full news study, 2026-11-29), and two such workers are the pool's peak. Numbers are unaffected."""
    try:
        return fn(*args)
    finally:
        give_back_memory()


def give_back_memory() -> bool:
    """Collect garbage and return the heap's free pages to the system (glibc's malloc_trim); False where the C
    library has no malloc_trim (not glibc: nothing to do)."""
    gc.collect()
    try:
        return bool(ctypes.CDLL(None).malloc_trim(0))
    except (OSError, AttributeError):
        return False


class TaskFailed(PersalignError):
    pass


@dataclass(eq=False)
class LocalRef:
    """A task: waiting for the refs among its args, running on the pool, or finished (result or error)."""

    fn: object
    args: tuple
    order: tuple = (0, 0)  # (priority, submission): the lowest ready one starts first
    heavy: bool = False  # memory-heavy: at most `heavy_at_once` side by side (the pool's peak memory)
    done: bool = False
    result: object = None
    error: Exception | None = None
    tries: int = 0
    resolved: tuple = field(default=())


def pass_parts(workers: int) -> int:
    """Tasks a shared ARGS pass's query batches are split over: two per worker, so that parts of uneven length
    still keep every worker busy (the parts change no number: each batch is decoded as in-process). Past 2
    workers the members' evaluation is split by seed too (`Submitter.members_by_seed`): each seed's task then
    computes the scoring the members share once more (full news study: ~4 min a seed), which 2 workers
    would pay for without a core to run it beside."""
    return 2 * workers


class LocalPool:
    """Task refs over a ProcessPoolExecutor, with the interface runner/task_graph.py expects. Its workers share
    the run dir (`in_place`); a task's own exception comes back as raised (persalign's one-line errors, an OS
    error, a bug's traceback), so a pooled run stops with the line an in-process run gives."""

    errors = (Exception,)
    in_place = True

    def __init__(self, options: PoolOptions, log_dir: Path):
        self.options, self.log_dir = options, Path(log_dir)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.waiting: list[LocalRef] = []  # for the refs among their args
        self.ready: list[LocalRef] = []  # started by priority as workers free up, not queued in the executor
        self.running: dict = {}  # future -> LocalRef
        self.executor = None
        self.started = self.submitted = 0

    def remote(self, fn, priority: int = 0, heavy: bool = False):
        pool = self

        class Remote:
            @staticmethod
            def remote(*args) -> LocalRef:
                ref = LocalRef(fn, args, (priority, pool.submitted), heavy)
                pool.submitted += 1
                pool.waiting.append(ref)
                pool._start_ready()
                return ref

        return Remote

    def _pool(self) -> ProcessPoolExecutor:
        if self.executor is None:
            self.started += 1
            log = self.log_dir / f"workers-{self.started}.log"
            self.executor = ProcessPoolExecutor(self.options.workers, multiprocessing.get_context("spawn"),
                                                initializer=_start_worker, initargs=(str(log), os.getpid()))
        return self.executor

    def _start_ready(self) -> None:
        for ref in list(self.waiting):
            needs = [arg for arg in ref.args if isinstance(arg, LocalRef)]
            failed = next((need for need in needs if need.error is not None), None)
            if failed is not None:
                self.waiting.remove(ref)
                ref.done, ref.error = True, TaskFailed(f"a task it needs failed: {failed.error}")
            elif all(need.done for need in needs):
                self.waiting.remove(ref)
                ref.resolved = tuple(arg.result if isinstance(arg, LocalRef) else arg for arg in ref.args)
                self.ready.append(ref)
        self._fill()

    def _fill(self) -> None:
        """Start the most urgent ready tasks while a worker is free (the executor's own queue is first in, first
        out: a training task queued behind every baseline cell would start the critical path last). A heavy task
        waits while `heavy_at_once` heavy ones run: two GenARM fits side by side were the news study's 5.1 GiB
        peak (`default_heavy_at_once`)."""
        while len(self.running) < self.options.workers:
            full = sum(r.heavy for r in self.running.values()) >= self.options.heavy_at_once
            ref = min((r for r in self.ready if not (r.heavy and full)), key=lambda r: r.order, default=None)
            if ref is None:
                return
            self.ready.remove(ref)
            ref.tries += 1
            self.running[self._pool().submit(run_task, ref.fn, *ref.resolved)] = ref

    def wait_one(self, refs: list) -> LocalRef:
        while True:
            finished = next((ref for ref in refs if ref.done), None)
            if finished is not None:
                return finished
            if not self.running and not self.ready:
                raise PersalignError("the local pool has tasks waiting on nothing that runs (a bug of persalign)")
            futures, _ = wait(list(self.running), return_when=FIRST_COMPLETED)
            for future in futures:
                self._settle(future)
            self._start_ready()

    def _settle(self, future) -> None:
        ref = self.running.pop(future, None)
        if ref is None:  # a future of a pool already replaced
            return
        try:
            ref.result, ref.done = future.result(), True
        except BrokenProcessPool:
            self._restart(ref)
        except Exception as error:  # the task's own exception, re-raised by the pool in this process
            ref.done, ref.error = True, error

    def _restart(self, first: LocalRef) -> None:
        """A worker died: every task the broken pool held is run again on a new pool, up to max_retries times."""
        broken = [first] + list(self.running.values())
        self.running.clear()
        self.close()
        for ref in broken:
            if ref.tries > self.options.max_retries:
                ref.done, ref.error = True, TaskFailed(f"its worker died {ref.tries} times (killed or out of memory)")
            else:
                self.ready.append(ref)
        self._fill()

    def get(self, ref: LocalRef):
        if ref.error is not None:
            raise ref.error
        return ref.result

    def close(self, kill: bool = True) -> None:
        """Free the pool; `kill`: kill every worker first (a task still running is lost; finished ones are
        stored), as on Ctrl-C, SIGTERM or a broken pool, where waiting would wait on a whole cell."""
        executor, self.executor = self.executor, None
        if executor is None:
            return
        for process in list((getattr(executor, "_processes", None) or {}).values()) if kill else []:
            process.kill()
        executor.shutdown(wait=True, cancel_futures=True)


def run_cells_on_pool(resolved, out_dir, options: PoolOptions, log):
    """Every cell of the resolved run not yet in `out_dir`, on a local pool; the store (the caller holds its lock)."""
    from persalign.runner.cells import open_store, run_context
    from persalign.runner.eta import Progress
    from persalign.runner.provenance import peak_memory_mib
    from persalign.runner.task_graph import Submitter, submit_all, wait_all

    started = time.perf_counter()
    store, cells, todo = open_store(resolved, out_dir, log)
    if not todo:
        return store
    run_context(resolved.config, store, log)  # data, split, embeddings: computed and cached once, here
    give_back_memory()  # the embedder and the data it built are not needed here again (the driver held ~460 MiB)
    pool = LocalPool(options, store.root / "logs")
    log(f"local pool: {options.workers} workers, one torch thread each (their logs: {pool.log_dir})")
    try:
        submitter = Submitter(pool, resolved.config, store, shared_args=True, pass_parts=pass_parts(options.workers),
                              members_by_seed=options.workers > 2)
        submit_all(submitter, cells, todo)
        wait_all(submitter, Progress(len(cells), len(cells) - len(todo), log), log, stop_at_first=True)
    except BaseException:  # a task's error, Ctrl-C, SIGTERM (raised by the CLI): no worker outlives the unwinding
        pool.close(kill=True)
        raise
    pool.close(kill=False)
    log(f"finished in {time.perf_counter() - started:.0f} s on {options.workers} workers "
        f"(driver peak memory {peak_memory_mib():.0f} MiB)")
    return store
