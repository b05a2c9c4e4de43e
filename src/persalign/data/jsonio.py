"""Reading JSON and JSONL with errors that name the file, the line and the problem."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterator

from persalign.errors import DataError


def existing_file(path: str | Path, what: str = "data file") -> Path:
    path = Path(path).expanduser()
    if not path.is_file():
        raise DataError(path, f"{what} not found")
    return path


def read_jsonl(path: str | Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield (line number, object) for each non-blank line of a JSONL file."""
    path = existing_file(path)
    with path.open(encoding="utf-8") as handle:
        for lineno, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                raise DataError(path, f"invalid JSON ({exc.msg} at column {exc.colno})", f"line {lineno}") from exc
            if not isinstance(record, dict):
                raise DataError(path, f"expected a JSON object, got {type(record).__name__}", f"line {lineno}")
            yield lineno, record


def read_json(path: str | Path) -> Any:
    path = existing_file(path)
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise DataError(path, f"invalid JSON ({exc.msg} at line {exc.lineno}, column {exc.colno})") from exc


def require_text(record: dict[str, Any], key: str, path: Path | str, where: str) -> str:
    """The non-empty string field `key` of `record`, or a DataError saying what is wrong."""
    if key not in record:
        raise DataError(path, f"field {key!r} is missing", where)
    value = record[key]
    if not isinstance(value, str):
        raise DataError(path, f"field {key!r} must be a string, got {type(value).__name__}", where)
    if not value.strip():
        raise DataError(path, f"field {key!r} is empty", where)
    return value.strip()
