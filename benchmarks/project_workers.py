"""How a pooled run's time grows with cores (issue #73): the run's own task graph (runner/task_graph.py, rebuilt from
its config.yaml) scheduled on N workers as the local pool schedules it (a free worker takes the ready task of the
lowest priority, then submission order), each task lasting what it took in the measured run (its task log:
`PERSALIGN_TASK_LOG`, which `bench_pool.py --keep` writes). The driver's own time (data, embeddings, report:
the measured wall minus the tasks' span) is added as measured.

A projection, stated as one: tasks are assumed to take the seconds they took on the measured run's workers
whatever the worker count (memory bandwidth shared by more workers would slow them; a single worker alone would
speed them up a little), and the critical path is printed beside it: no worker count goes below it.

    python benchmarks/project_workers.py --from-run /work/full-73/workers-2/study_news_full \\
        --tasks /work/full-73/workers-2/tasks.tsv --wall 6000 --workers 1 2 4 8 16 32
"""

from __future__ import annotations

import argparse
import heapq
import json
import sys
import tempfile
from collections import defaultdict, deque
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from common import count, existing_file, non_negative, run_folder  # noqa: E402


@dataclass(eq=False)  # a task is its own identity (the submitter keys its refs by it)
class Task:
    name: str
    priority: tuple
    needs: list = field(default_factory=list)
    seconds: float = 0.0
    heavy: bool = False  # memory-heavy: at most `heavy_at_once` side by side


class Recorder:
    """A backend for task_graph.Submitter that records each task and what it waits for instead of running it."""

    in_place = True

    def __init__(self):
        self.tasks: list[Task] = []

    def remote(self, fn, priority: int = 0, heavy: bool = False):
        recorder = self

        class Remote:
            @staticmethod
            def remote(config, planned, run_dir, *inputs) -> Task:
                task = Task(task_name(fn.__name__, planned), (priority, len(recorder.tasks)),
                            [arg for arg in inputs if isinstance(arg, Task)], heavy=heavy)
                recorder.tasks.append(task)
                return task

        return Remote


def task_name(kind: str, planned) -> str:
    """The name runner/tasks.py writes to the task log for this task."""
    if kind == "args_pass_files":  # before 2026-11-29: a policy's whole shared ARGS pass in one task
        return f"args_pass {planned[0].cell.policy} ({len(planned)} cells)"
    if kind == "args_validation_files":
        members, part, parts = planned
        return f"args_validation {members[0].cell.policy} part {part + 1} of {parts}"
    if kind == "args_lambdas_files":
        return f"args_lambdas {planned[0].cell.policy} ({len(planned)} cells)"
    if kind == "args_batches_files":
        members, part, parts = planned
        return f"args_batches {members[0].cell.policy} part {part + 1} of {parts}"
    if kind == "args_members_files":
        from persalign.runner.tasks import seeds_label

        members, group = planned
        return f"args_members {members[0].cell.policy} ({len(group)} cells{seeds_label(group)})"
    if kind == "train_files":
        return f"train {planned.method_label} seed {planned.cell.seed}"
    return f"cell {planned.cell.decoder} seed {planned.cell.seed}"


def task_graph(run_dir: Path, workers: int = 2) -> list[Task]:
    from persalign.core.config import load_config
    from persalign.runner.pool_backend import pass_parts
    from persalign.runner.resolve import resolve_run
    from persalign.runner.store import RunStore
    from persalign.runner.task_graph import Submitter, submit_all

    resolved = resolve_run(load_config(str(run_dir / "config.yaml")))
    recorder = Recorder()
    with tempfile.TemporaryDirectory() as empty:  # nothing stored: every task of the run, as the pool submits them
        cells = list(resolved.cells)
        submit_all(Submitter(recorder, resolved.config, RunStore(empty), shared_args=True,
                             pass_parts=pass_parts(workers), members_by_seed=workers > 2), cells, cells)
    return recorder.tasks


def _jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def pass_task_seconds(run_dir: Path, tasks: list[Task]) -> dict[str, float]:
    """The shared ARGS pass's tasks (validation parts, λ choice, query-batch parts, members, a GenARM cell) from
    a run that ran the pass, or its λ choice, as ONE task, out of its cells' own records. The λ choice is the
    rows' λ seconds (lambda.json: the pass's seconds charged by share), split by `lambda_split`. A batch part
    is the rows' charged generation seconds of its batches (their sum is the pass's time on that batch). A
    members task is its cells' scoring, metrics and prompts; in each seed
    task but the first, plus the scoring the first cell paid for every member (the policy's log-probs, memoised
    in-process) once more. A cell the pass never takes (GenARM) is its own task: all of its seconds."""
    cells = {}
    for folder in sorted(run_dir.glob("cells/*/*/seed-*")):
        choice = json.loads((folder / "lambda.json").read_text()) if (folder / "lambda.json").exists() else None
        if choice is not None:  # an ARGS cell
            cells[(folder.parent.name, int(folder.name.split("-")[1]))] = (choice, _jsonl(folder / "timings.jsonl"))
    from persalign.runner.store import folder_name

    taken = {key for key, (choice, _) in cells.items() if "shared_pass_members" in choice}
    batches = [r for key in taken for r in cells[key][1] if isinstance(r.get("batch"), int)]
    own = {key: sum(r.get(k, 0.0) for r in rows for k in ("scoring_s", "metrics_s", "prompts_s"))
           + (0.0 if key in taken else sum(r.get("generation_s", 0.0) for r in rows) + choice["seconds"])
           for key, (choice, rows) in cells.items()}
    first = min(cells)  # the cell the in-process run scored first: it filled the shared memo
    shared = own[first] - min(own[k] for k in cells if k[0] == first[0])
    out: dict[str, float] = {}
    decodes, choosing = lambda_split([cells[k][0] for k in taken])
    groups = validation_groups(run_dir, len(taken))
    for task in tasks:
        if task.name.startswith("args_validation"):  # its share of the groups, each taking an even share
            number, parts = map(int, task.name.rsplit("part ", 1)[1].split(" of "))
            out[task.name] = decodes * len(range(number - 1, groups, parts)) / groups
        elif task.name.startswith("args_lambdas"):
            out[task.name] = choosing
        elif task.name.startswith("args_batches"):
            number, parts = map(int, task.name.rsplit("part ", 1)[1].split(" of "))
            out[task.name] = sum(r["generation_s"] for r in batches if r["batch"] % parts == number - 1)
        elif task.name.startswith("args_members"):
            seed = int(task.name.split("seed ")[1].rstrip(")")) if "seed " in task.name else None
            group = [k for k in taken if seed is None or k[1] == seed]
            out[task.name] = sum(own[k] for k in group) + (shared if seed not in (None, first[1]) else 0.0)
        elif task.name.startswith("cell "):  # an ARGS cell the pass never takes (GenARM): decoded alone
            decoder, seed = task.name.removeprefix("cell ").rsplit(" seed ", 1)
            if (folder_name(decoder), int(seed)) in own:
                out[task.name] = own[(folder_name(decoder), int(seed))]
    return out


def validation_groups(run_dir: Path, members: int) -> int:
    """The λ choice's passes (runner/args_pass._groups): validation prompts in groups of `prompts_per_pass`
    (token budgets aside, which split no group of the news study)."""
    import math

    from persalign.core.config import load_config
    from persalign.runner.args_pass import guided_lambdas, prompts_per_pass

    config = load_config(str(run_dir / "config.yaml"))
    heads = max(1, members * len(guided_lambdas(config)))
    return math.ceil(config.args.validation_size / prompts_per_pass(config, heads))


def lambda_split(choices: list[dict]) -> tuple[float, float]:
    """The λ choice's seconds (its members' lambda.json, where each holds its own choosing plus its share of the
    validation passes by candidate forwards done) split into the passes' and the choosing's: the least-squares
    line of seconds against share (intercept: one member's own choosing; slope: the passes). The validation
    parts then take the passes' seconds evenly (their prompt groups are interleaved), the choice task the rest."""
    import numpy as np

    done = np.array([c.get("candidate_forwards_done", 0.0) for c in choices], dtype=float)
    seconds = np.array([c["seconds"] for c in choices], dtype=float)
    if len(choices) < 3 or not done.sum() or np.ptp(done) == 0:  # no line to fit: all of it to the passes
        return float(seconds.sum()), 0.0
    (_, passes), *_ = np.linalg.lstsq(np.vstack([np.ones_like(done), done / done.sum()]).T, seconds, rcond=None)
    passes = float(min(max(passes, 0.0), seconds.sum()))
    return passes, float(seconds.sum()) - passes


def measured_seconds(tsv: Path) -> tuple[dict[str, deque], float]:
    """Each task name's durations in the order they ended, and the span from the first start to the last end."""
    started, durations, times = {}, defaultdict(deque), []
    for line in tsv.read_text().splitlines():
        event, what, worker, _where, stamp = line.split("\t")
        times.append(float(stamp))
        if event == "start":
            started[worker] = (what, float(stamp))
        elif started.get(worker, ("",))[0] == what:
            durations[what].append(float(stamp) - started.pop(worker)[1])
    return durations, max(times) - min(times)


def schedule(tasks: list[Task], workers: int, heavy_at_once: int = 1) -> float:
    """The tasks' span on `workers` workers, the local pool's way: the ready task of the lowest priority first,
    a heavy one only while fewer than `heavy_at_once` heavy ones run (as the pool since 2026-11-29)."""
    waiting = {id(t): len(t.needs) for t in tasks}
    after = defaultdict(list)
    for task in tasks:
        for need in task.needs:
            after[id(need)].append(task)
    ready = sorted((t for t in tasks if not t.needs), key=lambda t: t.priority)
    running, now = [], 0.0  # (end time, id, task)
    while ready or running:
        while len(running) < workers:
            blocked = sum(t.heavy for _, _, t in running) >= heavy_at_once
            task = next((t for t in ready if not (t.heavy and blocked)), None)
            if task is None:
                break
            ready.remove(task)
            heapq.heappush(running, (now + task.seconds, id(task), task))
        now, _, done = heapq.heappop(running)
        for task in after[id(done)]:
            waiting[id(task)] -= 1
            if not waiting[id(task)]:
                ready.append(task)
                ready.sort(key=lambda t: t.priority)
    return now


def critical_path(tasks: list[Task]) -> float:
    return sum(task.seconds for task in critical_chain(tasks))


def critical_chain(tasks: list[Task]) -> list[Task]:
    """The longest chain of tasks each waiting for the one before, first to last."""
    finish: dict[int, float] = {}
    before: dict[int, Task | None] = {}
    for task in tasks:  # submission order is a topological order: a task's needs were submitted first
        last = max(task.needs, key=lambda n: finish[id(n)], default=None)
        finish[id(task)] = task.seconds + (finish[id(last)] if last is not None else 0.0)
        before[id(task)] = last
    chain, task = [], max(tasks, key=lambda t: finish[id(t)])
    while task is not None:
        chain.append(task)
        task = before[id(task)]
    return chain[::-1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--from-run", type=lambda t: Path(run_folder(t)), required=True)
    parser.add_argument("--tasks", type=lambda t: Path(existing_file(t)), required=True, help="the run's task log")
    parser.add_argument("--wall", type=non_negative, help="the measured wall seconds (adds the driver's own time)")
    parser.add_argument("--workers", type=count, nargs="+", default=[1, 2, 4, 8, 16, 32])
    parser.add_argument("--heavy-at-once", type=count, default=None, help="memory-heavy tasks side by side at "
                        "most, as `persalign run --heavy-at-once` (default: the pool's, half the workers)")
    args = parser.parse_args()
    durations, span = measured_seconds(args.tasks)
    driver = args.wall - span if args.wall else 0.0
    graphs = {workers: timed_tasks(args.from_run, durations, workers) for workers in sorted({1, *args.workers})}
    tasks = graphs[2] if 2 in graphs else graphs[min(graphs)]
    total = sum(t.seconds for t in tasks)
    print(f"{len(tasks)} tasks at 2 workers, {total / 60:.1f} worker-minutes; the measured run's tasks spanned "
          f"{span / 60:.1f} min, the driver's own {driver / 60:.1f} min")
    print("| workers | projected wall (min) | of which tasks | critical path (min) | speed-up over 1 |")
    print("|---|---|---|---|---|")
    from persalign.runner.pool_backend import default_heavy_at_once

    def rule(workers: int) -> int:
        return args.heavy_at_once or default_heavy_at_once(workers)

    one = schedule(graphs[1], 1, rule(1)) + driver
    for workers in args.workers:
        span_n = schedule(graphs[workers], workers, rule(workers))
        print(f"| {workers} | {(span_n + driver) / 60:.1f} | {span_n / 60:.1f} | "
              f"{critical_path(graphs[workers]) / 60:.1f} | {one / (span_n + driver):.2f}× |")
    most = max(args.workers)
    print(f"critical path at {most} workers: " + " → ".join(
        f"{t.name} ({t.seconds / 60:.1f} min)" for t in critical_chain(graphs[most])))


def timed_tasks(run_dir: Path, durations: dict, workers: int) -> list[Task]:
    """The run's task graph as the pool submits it at `workers`, each task lasting what it took in the measured
    run (its log), or, for the shared pass's tasks of a run that ran the pass whole, `pass_task_seconds`."""
    tasks = task_graph(run_dir, workers)
    measured = {name: deque(seconds) for name, seconds in durations.items()}
    if not any(name.startswith("args_validation") for name in measured):  # the λ choice ran as one task
        measured = {name: seconds for name, seconds in measured.items() if not name.startswith("args_lambdas")}
    missing = [t for t in tasks if not measured.get(t.name)]
    derived = pass_task_seconds(run_dir, missing) if missing else {}
    unknown = [t.name for t in missing if t.name not in derived]
    if unknown:
        sys.exit(f"no measured duration for {len(unknown)} tasks, e.g. {unknown[0]!r}")
    for task in tasks:
        task.seconds = measured[task.name].popleft() if measured.get(task.name) else derived[task.name]
    return tasks


if __name__ == "__main__":
    main()
