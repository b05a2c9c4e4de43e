"""Cost of a whole `persalign study`: wall time, peak memory, and seconds per stage.

Runs `persalign study CONFIG` as a child process (cold by default: an empty
PERSALIGN_CACHE, so frozen features, embeddings and the converted model are
all computed), measures its wall time and peak resident memory (the child's
ru_maxrss, what `/usr/bin/time -v` reports), then reads the run's own timing
records for the per-stage seconds (the report's cost table, total row) and
the highest per-cell peak, and ARGS's candidate forwards per stage: needed by each method deployed alone
and done by the shared pass (issue #42). `--from-run DIR` only reads a finished run.

    python benchmarks/bench_study.py configs/study_news.yaml              # the issue #6 figure (~2 h on 2 cores)
    python benchmarks/bench_study.py configs/study_news.yaml --quick
    python benchmarks/bench_study.py --from-run runs/study-study_news/study_news

After the run, the time of every stage is set against what this machine allows for the work the
run did (`bench_floor.py`: seconds ÷ floor per stage and for the whole run; `--no-floor` skips it).
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import emit, run_folder, machine


def run_figures(run_dir: Path) -> dict:
    """Per-stage seconds and the highest per-cell peak, from the stored run only."""
    from persalign.report.markdown import results_frame, stage_totals
    from persalign.runner.store import RunStore

    frame = results_frame(RunStore(run_dir))
    if frame.empty:
        sys.exit(f"{run_dir}: no finished cells (metrics.json) to read")
    stages = stage_totals(frame)
    return {"run_dir": str(run_dir), "cells": len(frame),
            "stage_seconds": {name: round(seconds, 1) for name, seconds in stages.items()},
            "stage_seconds_total": round(sum(stages.values()), 1),
            "max_cell_peak_memory_mib": round(float(frame["peak_memory_mib"].max()), 1)}


def shared_pass_figures(run_dir: Path) -> dict:
    """ARGS candidate forwards per stage over every cell: needed (each method deployed alone), done (by the
    shared pass, issue #42), the share saved, and the near-tie steps the pass counted."""
    from persalign.runner.store import RunStore

    totals: dict[str, dict[str, float]] = {}
    for metrics in RunStore(run_dir).all_metrics():
        for stage, counts in (metrics.get("args_candidate_forwards") or {}).items():
            for key, value in counts.items():
                totals.setdefault(stage, {}).setdefault(key, 0.0)
                totals[stage][key] += value or 0
    for counts in totals.values():
        counts["saved_share"] = round(1 - counts["done"] / counts["needed"], 3) if counts.get("needed") else 0.0
        counts["done"] = round(counts["done"], 1)
    return {"args_candidate_forwards": totals}


def run_study(config: str, quick: bool, overrides: list[str], output: Path, cold: bool) -> dict:
    """Run the study as a child process; its wall time and peak resident memory."""
    command = [str(Path(sys.executable).with_name("persalign")), "study", config, "-o", str(output)]
    command += ["--quick"] * quick + overrides
    environment = dict(os.environ)
    with tempfile.TemporaryDirectory(prefix="persalign-cold-cache-") as cache:
        if cold:
            environment["PERSALIGN_CACHE"] = cache
        start = time.perf_counter()
        subprocess.run(command, env=environment, check=True)
        wall = time.perf_counter() - start
    peak_kib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return {"command": " ".join(command), "cold_cache": cold, "wall_s": round(wall, 1),
            "wall_min": round(wall / 60, 2), "peak_memory_gib": round(peak_kib / 2**20, 2)}


def floor_figures(run_dir: Path, skip: bool) -> dict:
    """Seconds ÷ what this machine allows, per stage (benchmarks/bench_floor.py), printed and returned."""
    if skip:
        return {}
    from bench_floor import floor_report

    report = floor_report(run_dir)
    return {"floor": {"generation_over_floor": report["generation_over_floor"], "stages": report["stages"],
                      "whole_over_floor": report["whole_over_floor"], "gflop_per_s": report["gflop_per_s"]}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("config", nargs="?", help="the study config (YAML file or built-in name)")
    parser.add_argument("--quick", action="store_true", help="pass --quick to the study")
    parser.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="config overrides passed on to the study")
    parser.add_argument("-o", "--output", help="study directory (default: a fresh temporary one)")
    parser.add_argument("--warm", action="store_true", help="keep the usual cache instead of an empty one")
    parser.add_argument("--from-run", type=lambda t: Path(run_folder(t)),
                        help="only read this finished run directory")
    parser.add_argument("--no-floor", action="store_true", help="skip seconds ÷ floor per stage (bench_floor.py)")
    args = parser.parse_intermixed_args()  # overrides may follow --quick
    if args.from_run:
        emit({"machine": machine(), **run_figures(args.from_run), **shared_pass_figures(args.from_run),
              **floor_figures(args.from_run, args.no_floor)})
        return
    if not args.config:
        parser.error("give a study config, or --from-run DIR")
    with tempfile.TemporaryDirectory(prefix="persalign-study-") as scratch:
        output = Path(args.output or scratch)
        measured = run_study(args.config, args.quick, args.overrides, output, cold=not args.warm)
        (run_dir,) = [p.parent for p in output.glob("*/config.yaml")] or [output]
        emit({"machine": machine(), **measured, **run_figures(run_dir), **shared_pass_figures(run_dir),
              **floor_figures(run_dir, args.no_floor)})


if __name__ == "__main__":
    main()
