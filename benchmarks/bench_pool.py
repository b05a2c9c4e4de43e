"""A persalign command timed at several worker counts: wall seconds and the peak memory of the whole process tree
(driver + workers, sampled every 0.5 s), with the CPU named (issue #73): the summed resident set size, which counts
the pages the processes share (torch's libraries) once per process, and the summed proportional set size (PSS),
which counts them once: the memory the machine needs. /usr/bin/time's "maximum resident set size" is the largest
single process, not the pool's sum.

    python benchmarks/bench_pool.py --workers 1 2 -- study demo            # the demo, cold model cache each time
    python benchmarks/bench_pool.py --workers 2 --warm-cache -- study demo
    python benchmarks/bench_pool.py --workers 2 --warm-cache --keep /work/full-73 -- study configs/study_news_full.yaml

--keep DIR keeps each run (DIR/workers-N) and its task log (DIR/workers-N/tasks.tsv: which worker ran which task,
and when) for `bench_study.py --from-run` and the scale-out projection (docs/scale-out.md), and the memory samples
(DIR/workers-N/memory.tsv: seconds, summed RSS and PSS). Every result says when the PSS peak came, each process's
PSS then, and (with --keep) the tasks running at that moment: where the pool's memory goes.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import count

ROOT = Path(__file__).resolve().parents[1]


def _proportional_kib(entry: Path) -> int:
    """The process's proportional set size: pages it shares (torch's libraries, in every worker) counted once over
    the processes sharing them."""
    try:
        return next((int(line.split()[1]) for line in (entry / "smaps_rollup").read_text().splitlines()
                     if line.startswith("Pss:")), 0)
    except OSError:
        return 0


def tree_processes(root_pid: int) -> dict[int, tuple[float, float]]:
    """pid -> (RSS, PSS) in MiB of `root_pid` and every descendant, from /proc; only the tree's own smaps are
    read, so the sampling costs little beside the run."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                children.setdefault(int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1]), []).append(
                    int(entry.name))
            except OSError:
                continue
    found = {}
    todo = [root_pid]
    while todo:
        pid = todo.pop()
        todo += children.get(pid, [])
        try:
            status = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            continue
        rss = next((int(line.split()[1]) for line in status.splitlines() if line.startswith("VmRSS:")), 0)
        found[pid] = (rss / 1024, _proportional_kib(Path(f"/proc/{pid}")) / 1024)
    return found


def measure(command: list[str], env: dict, samples: Path | None = None) -> dict:
    """Wall seconds, the peak summed RSS and PSS, and the moment of the PSS peak with each process's PSS then;
    every sample written to `samples` (TSV) when given."""
    started, peak, peak_pss, at, shares = time.perf_counter(), 0.0, 0.0, 0.0, {}
    process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    log = samples.open("w", buffering=1) if samples else None  # line-buffered: readable while the run goes on
    while process.poll() is None:
        processes, now = tree_processes(process.pid), time.perf_counter() - started
        rss, pss = sum(r for r, _ in processes.values()), sum(p for _, p in processes.values())
        if pss > peak_pss:
            at, shares, epoch = now, {pid: round(p) for pid, (_, p) in processes.items()}, time.time()
        peak, peak_pss = max(peak, rss), max(peak_pss, pss)
        if log:
            log.write(f"{now:.1f}\t{rss:.0f}\t{pss:.0f}\n")
        time.sleep(0.5)
    if log:
        log.close()
    if process.returncode:
        sys.exit(f"{' '.join(command)} failed ({process.returncode}):\n{process.stdout.read()[-3000:]}")
    return {"wall_s": round(time.perf_counter() - started, 1), "peak_tree_rss_mib": round(peak),
            "peak_tree_pss_mib": round(peak_pss), "peak_at_s": round(at, 1), "peak_process_pss_mib": shares,
            "peak_epoch": round(epoch, 1) if shares else None}


def tasks_running(task_log: Path, epoch: float | None) -> list[str]:
    """The tasks of a pool's task log (start / end lines: kind, task, worker, run, epoch seconds) running at
    `epoch`: what was in memory at the peak."""
    if epoch is None or not task_log.is_file():
        return []
    begun: dict[tuple[str, str], float] = {}
    running = []
    for line in task_log.read_text().splitlines():
        kind, task, worker, _, when = line.split("\t")
        if kind == "start":
            begun[(task, worker)] = float(when)
        elif begun.get((task, worker), epoch + 1) <= epoch < float(when):
            running.append(f"{task} ({worker})")
        if kind == "end":
            begun.pop((task, worker), None)
    return sorted(running + [f"{task} ({worker}, unfinished)" for (task, worker), when in begun.items()
                             if when <= epoch])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workers", type=count, nargs="+", default=[1, 2])
    parser.add_argument("--warm-cache", action="store_true", help="keep the model cache (default: a cold one "
                        "each time, model conversion included)")
    parser.add_argument("--keep", type=Path, help="keep each run and its task log under this folder")
    parser.add_argument("persalign_args", nargs="+", help="the persalign command after --")
    args = parser.parse_args()
    from persalign.models.numerics import cpu_identity, cpu_name_and_vendor

    cpu = f"{cpu_name_and_vendor()[0]} ({cpu_identity()}, {os.cpu_count()} cores)"
    for workers in args.workers:
        with tempfile.TemporaryDirectory() as tmp:
            env = {**os.environ, "PERSALIGN_CACHE": os.environ.get("PERSALIGN_CACHE", "") if args.warm_cache
                   else str(Path(tmp) / "cache")}
            if not env["PERSALIGN_CACHE"]:
                env.pop("PERSALIGN_CACHE")
            runs = args.keep / f"workers-{workers}" if args.keep else Path(tmp) / "runs"
            if args.keep:
                runs.mkdir(parents=True, exist_ok=True)
                env["PERSALIGN_TASK_LOG"] = str(runs / "tasks.tsv")
            command = [sys.executable, "-m", "persalign.cli.commands", *args.persalign_args, "--quiet",
                       "-o", str(runs), "--workers", str(workers)]
            result = {"benchmark": "pool", "cpu": cpu, "workers": workers, "cold_cache": not args.warm_cache,
                      "command": "persalign " + " ".join(args.persalign_args),
                      **measure(command, env, runs / "memory.tsv" if args.keep else None)}
            if args.keep:
                result["tasks_at_peak"] = tasks_running(runs / "tasks.tsv", result["peak_epoch"])
            print(json.dumps(result), flush=True)
            if not args.keep:
                shutil.rmtree(runs, ignore_errors=True)


if __name__ == "__main__":
    main()
