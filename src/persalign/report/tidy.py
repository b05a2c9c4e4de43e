"""One tidy row per cell, for pandas: who (run, data set, policy, seed), what (method, deployment kind,
label, λ, shots), every metric with its 95% interval over the cell's users, and the counted cost.

The interval is the reports' (Hall's skewness-corrected t over per-user means, clipped to the metric's
range; empty where the procedure does not hold, e.g. fewer than 8 users), computed on the cell's own rows.

    persalign export runs/demo/demo --format csv -o cells.csv
    python -c "import pandas as pd; print(pd.read_csv('cells.csv').head())"
"""

from __future__ import annotations

from pathlib import Path

from persalign.analysis.intervals import PERCENT, mean_interval
from persalign.analysis.study import BOUNDS, ROW_COLUMNS, display_labels, per_user_means
from persalign.runner.store import Cell, RunStore

METRICS = ("rouge1", "rougeL", "bertscore_f1", "policy_accuracy", "rm_accuracy", "win_rate")


def _interval(rows: list[dict], metric: str) -> tuple[float | None, float | None]:
    column, scale = ROW_COLUMNS[metric]
    means = [scale * v for v in per_user_means(rows, column).values()]
    if not means:
        return None, None
    result = mean_interval(means, BOUNDS.get(metric, PERCENT))
    return result.get("low"), result.get("high")


def _costs(cell: dict) -> dict:
    """The counted costs the verdict uses (cost.py), never metered FLOPs (those depend on caches and resumes)."""
    training = (cell.get("settings") or {}).get("training") or {}
    adapt = training.get("adapt_work") if isinstance(training, dict) else None
    return {"generation_flops_per_output": (cell.get("counted_work") or {}).get("flops_per_output"),
            "adaptation_flops_per_user": adapt.get("flops_per_user") if isinstance(adapt, dict) else None}


def tidy_rows(results: dict) -> list[dict]:
    """results.json's cells as flat rows (report/results.build_results)."""
    store = RunStore(results["run"]["directory"])
    config = results["run"]["config"] or {}
    labels = display_labels(results["cells"])
    out = []
    for cell in results["cells"]:
        settings = cell.get("settings") or {}
        row = {"run": Path(store.root).name, "dataset": (config.get("data") or {}).get("dataset"),
               "policy": cell["policy"], "seed": cell["seed"], "method": settings.get("method"),
               "deployment": cell.get("decoder_name") or settings.get("decoder_name"),
               "label": labels[(cell["policy"], cell["decoder"])], "lambda": settings.get("lambda"),
               "shots": settings.get("shots"), "users": cell.get("users"), "examples": cell.get("examples")}
        stored = store.read_rows(Cell(cell["policy"], cell["decoder"], cell["seed"]))
        for metric in METRICS:  # every row the same columns; an empty one is dropped by the caller
            low, high = _interval(stored, metric) if cell.get(metric) is not None else (None, None)
            row.update({metric: cell.get(metric), f"{metric}_low": low, f"{metric}_high": high})
        out.append({**row, **_costs(cell)})
    return out
