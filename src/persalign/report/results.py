"""results.json: a run's results for other programs (versioned schema, documented in docs/results-json.md).

Built only from the stored cells, like every report; written beside report.md
by `persalign run` / `report` / `study`. `persalign export` gives the same as
JSON, or one CSV row per cell for pandas:

    persalign export runs/demo --format csv -o cells.csv
    python -c "import pandas as pd; print(pd.read_csv('cells.csv').head())"
"""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

from persalign.analysis.bootstrap import metric_ci
from persalign.analysis.study import load_results
from persalign.files import read_json, write_atomic
from persalign.runner.store import RunStore

SCHEMA = "persalign.results"
SCHEMA_VERSION = 1
CI_BOOTSTRAPS, CI_SEED = 1000, 0
CELL_KEYS = ("policy", "decoder", "seed", "examples")  # first CSV columns; then metrics, then counted work


def _summaries(run_dir: str | Path) -> list[dict]:
    """Per policy × deployment: every metric's mean over users (seeds averaged first) with a 95 % bootstrap CI."""
    out = []
    for policy, methods in load_results(run_dir).items():
        for result in methods:
            metrics = {metric: {**metric_ci(means, CI_BOOTSTRAPS, CI_SEED), "users": len(means)}
                       for metric, means in sorted(result.user_means.items()) if means}
            out.append({"policy": policy, "deployment": result.label, "seeds": result.seeds,
                        "properties": result.properties, "metrics": metrics})
    return out


def build_results(run_dir: str | Path) -> dict:
    """The whole document: run (config, provenance), deployments (means with CIs), cells (as stored)."""
    store = RunStore(run_dir)
    store.check_is_run()
    cells = store.all_metrics()
    provenance = store.root / "provenance.json"
    return {
        "schema": SCHEMA, "schema_version": SCHEMA_VERSION,
        "run": {"directory": str(store.root), "config": store.config(),
                "provenance": read_json(provenance) if provenance.exists() else None},
        "deployments": _summaries(run_dir) if cells else [],
        "cells": cells,
        "damaged_cells": list(getattr(store, "problems", [])),
    }


def write_results(run_dir: str | Path, results: dict | None = None) -> Path:
    path = Path(run_dir) / "results.json"
    write_atomic(path, json.dumps(build_results(run_dir) if results is None else results, indent=1, default=str))
    return path


def _flat(prefix: str, value, row: dict) -> None:
    if isinstance(value, dict):
        for key, inner in value.items():
            _flat(f"{prefix}.{key}" if prefix else key, inner, row)
    elif not isinstance(value, list):
        row[prefix] = value


def cells_csv(results: dict) -> str:
    """One row per cell: its keys, every metric, and the counted work and stage seconds as dotted columns."""
    rows = []
    for cell in results["cells"]:
        row = {k: cell.get(k) for k in CELL_KEYS}
        for key, value in cell.items():
            if key in CELL_KEYS or key == "settings":
                continue
            _flat(key, value, row)
        rows.append(row)
    columns = list(dict.fromkeys(c for row in rows for c in row))
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=columns, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return buffer.getvalue()


def export(run_dir: str | Path, fmt: str) -> str:
    results = build_results(run_dir)
    return cells_csv(results) if fmt == "csv" else json.dumps(results, indent=1, default=str)
