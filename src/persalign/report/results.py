"""results.json: a run's results for other programs (versioned schema, documented in docs/results-json.md).

Built only from the stored cells, like every report; written beside report.md
by `persalign run` / `report` / `study`. `persalign export` gives the same as
JSON, or one CSV row per cell for pandas:

    persalign export runs/demo --format csv -o cells.csv
    python -c "import pandas as pd; print(pd.read_csv('cells.csv').head())"
"""

from __future__ import annotations

import json
from pathlib import Path

from persalign.analysis.study import analyse
from persalign.core.files import read_json, write_atomic
from persalign.report.completeness import absent_cells
from persalign.runner.store import Cell, RunStore

SCHEMA = "persalign.results"
SCHEMA_VERSION = 1
# `export --costs` columns
COST_KEYS = ("stage_seconds", "stage_flops", "stage_shared_flops", "counted_work", "peak_memory_mib",
             "peak_gpu_memory_mib", "numerics")


def _summaries(analyses: list) -> list[dict]:
    """Per policy × deployment: every metric's mean over users (seeds averaged first) with the 95 % bootstrap
    CI the reports show (analysis.study's `cis`, not computed a second time)."""
    out = []
    for analysis in analyses:
        for result in analysis.methods:
            cis = analysis.cis.get(result.label, {})
            metrics = {metric: {**cis[metric], "users": len(result.user_means[metric])} for metric in sorted(cis)}
            out.append({"policy": analysis.policy, "deployment": result.label, "seeds": result.seeds,
                        "properties": result.properties, "metrics": metrics})
    return out


def build_results(run_dir: str | Path, analyses: list | None = None) -> dict:
    """The whole document: run (config, provenance), deployments (means with CIs), cells (as stored).
    `analyses` (analysis.study.analyse) when the caller already has them."""
    store = RunStore(run_dir)
    store.check_is_run()
    cells = store.all_metrics()
    provenance = store.root / "provenance.json"
    if cells and analyses is None:
        analyses = analyse(run_dir)
    return {
        "schema": SCHEMA, "schema_version": SCHEMA_VERSION,
        "run": {"directory": str(store.root), "config": store.config(),
                "provenance": read_json(provenance) if provenance.exists() else None},
        "deployments": _summaries(analyses) if cells else [],
        "cells": cells,
        "damaged_cells": list(getattr(store, "problems", [])),
        "absent_cells": absent_cells(store, {(c["policy"], c["decoder"], c["seed"]) for c in cells}),
    }


def write_results(run_dir: str | Path, analyses: list | None = None) -> Path:
    path = Path(run_dir) / "results.json"
    write_atomic(path, json.dumps(build_results(run_dir, analyses), indent=1, default=str))
    return path


def cells_csv(results: dict, costs: bool = False) -> str:
    """One tidy row per cell (report/tidy.py); `costs` adds every counted-work and timing column as it is stored."""
    import pandas as pd

    from persalign.report.tidy import METRICS, tidy_rows

    frame = pd.DataFrame(tidy_rows(results))
    absent = [m for m in METRICS if frame[m].isna().all()]  # a metric no cell has; its bounds stay otherwise
    frame = frame.drop(columns=[c for m in absent for c in (m, f"{m}_low", f"{m}_high")])
    frame = frame.astype({c: "Int64" for c in ("seed", "shots", "users", "examples")})
    if costs:
        internals = pd.json_normalize([{k: v for k, v in cell.items() if k in COST_KEYS} for cell in results["cells"]])
        frame = pd.concat([frame, internals], axis=1)
    lists = [c for c in frame.columns if frame[c].map(lambda v: isinstance(v, (list, dict))).any()]
    return frame.drop(columns=lists).to_csv(index=False, lineterminator="\n")


def all_rows(run_dir: str | Path) -> str:
    """Every stored row of every cell as JSONL (lm-evaluation-harness's --log_samples): which cell it belongs to,
    the query, the prompt as the policy read it, the user's text, the generation and its scores."""
    store = RunStore(run_dir)
    store.check_is_run()
    lines = []
    for cell in store.all_metrics():
        key = {"policy": cell["policy"], "deployment": cell["decoder"], "seed": cell["seed"]}
        lines += [json.dumps({**key, **row}, default=str) for row in store.read_rows(
            Cell(cell["policy"], cell["decoder"], cell["seed"]))]
    return "\n".join(lines) + "\n" if lines else ""


def export(run_dir: str | Path, fmt: str, costs: bool = False) -> str:
    if fmt == "rows":
        return all_rows(run_dir)
    results = build_results(run_dir)
    return cells_csv(results, costs) if fmt == "csv" else json.dumps(results, indent=1, default=str)
