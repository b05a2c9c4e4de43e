"""What a stored cell must look like to be used: metrics.json types, rows matching their summary, JSON lines.

A check returns the problem in words (None: usable); the store names the file and sets it aside or skips it.
Run: pytest tests/test_damaged_files.py
"""

from __future__ import annotations

import json
from pathlib import Path

from persalign.core.errors import DataError
from persalign.core.files import fields

METRICS_FIELDS = {"policy": str, "decoder": str, "seed": int, "examples": int}
OBJECT_OR_NULL = (dict, type(None))
METRICS_OTHER_KINDS = {"decoder_name": str, "decoder_index": int, "seed_dependent": bool, "deployment": OBJECT_OR_NULL,
                       "settings": OBJECT_OR_NULL, "counted_work": OBJECT_OR_NULL, "stage_seconds": OBJECT_OR_NULL,
                       "stage_flops": OBJECT_OR_NULL, "stage_shared_flops": OBJECT_OR_NULL,
                       "args_candidate_forwards": OBJECT_OR_NULL, "numerics": OBJECT_OR_NULL}


def metrics_problem(metrics) -> str | None:
    """Why a metrics.json cannot be used (None: it can): the cell's keys and types, every other value a
    number or null (a report computing on a string would stop with a traceback, or mislead)."""
    problem = fields(METRICS_FIELDS, METRICS_OTHER_KINDS)(metrics)
    if problem:
        return problem
    for key, value in metrics.items():
        if key not in METRICS_FIELDS and key not in METRICS_OTHER_KINDS and \
                (isinstance(value, bool) or not isinstance(value, (int, float, type(None)))):
            return f"{key!r} is {value!r:.40}, not a number"
    for key in ("stage_seconds", "stage_flops", "stage_shared_flops"):
        stages = metrics.get(key) or {}
        if any(isinstance(v, bool) or not isinstance(v, (int, float)) for v in stages.values()):
            return f"{key!r} holds a value that is not a number"
    return None


def rows_problem(metrics: dict, rows: list[dict]) -> str | None:
    """Why a cell's rows cannot be the ones its metrics.json summarises (None: they can)."""
    if not isinstance(metrics, dict):
        return "metrics.json is not an object"
    expected = metrics.get("examples")
    if isinstance(expected, int) and not isinstance(expected, bool) and len(rows) != expected:
        return (f"rows.jsonl holds {len(rows)} rows, metrics.json summarises {expected}; "
                "re-run the same command to recompute the cell")
    return None


def short(error: Exception) -> str:
    return str(error).splitlines()[0][:160]


def parse_line(path: Path, number: int, line: bytes) -> dict:
    try:
        record = json.loads(line.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise DataError(path, f"line {number} is damaged ({short(error)})") from None
    if not isinstance(record, dict):
        raise DataError(path, f"line {number} is not a JSON object")
    problem = line_problem(path.name, record)
    if problem:
        raise DataError(path, f"line {number} {problem}")
    return record


def is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def line_problem(name: str, record: dict) -> str | None:
    """What the code relies on in a row (id, batch) or a timing line (batch, seconds per stage)."""
    batch = record.get("batch")
    if not (is_number(batch) and isinstance(batch, int) and batch >= 0) and \
            not (name == "timings.jsonl" and batch == "metrics"):
        return f"has batch {batch!r:.40}, not a batch number"
    if name == "rows.jsonl" and not isinstance(record.get("id"), str):
        return f"has id {record.get('id')!r:.40}, not an example id"
    if name == "timings.jsonl" and not all(is_number(v) for k, v in record.items() if k.endswith("_s")):
        return "has a stage time that is not a number"
    return None
