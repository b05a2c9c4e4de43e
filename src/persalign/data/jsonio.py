"""Reading JSON and JSONL with errors that name the file, the line and the problem."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from persalign.core.errors import DataError


def existing_file(path: str | Path, what: str = "data file") -> Path:
    path = Path(path).expanduser()
    if path.is_dir():
        raise DataError(path, f"a directory, not a {what} (give the file inside it)")
    if path.exists() and not path.is_file():
        raise DataError(path, f"not a regular file (a device or pipe); give a {what}")
    if not path.exists():
        raise DataError(path, f"{what} not found")
    return path


def _decode(path: Path, raw: bytes, where: str, offset: int) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise DataError(path, f"not UTF-8 text (byte 0x{raw[exc.start]:02x} at byte offset {offset + exc.start} "
                              "of the file)", where) from None


def read_jsonl(path: str | Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield (line number, object) for each non-blank line of a JSONL file."""
    path = existing_file(path)
    with path.open("rb") as handle:
        offset = 0
        for lineno, raw in enumerate(handle, start=1):
            line = _decode(path, raw, f"line {lineno}", offset)
            offset += len(raw)
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                raise DataError(path, f"invalid JSON ({exc.msg} at column {exc.colno})", f"line {lineno}") from exc
            if not isinstance(record, dict):
                raise DataError(path, f"expected a JSON object, got {type(record).__name__}", f"line {lineno}")
            yield lineno, only_text(record, path, f"line {lineno}")


def read_json(path: str | Path) -> Any:
    path = existing_file(path)
    raw = path.read_bytes()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise DataError(path, f"not UTF-8 text (byte 0x{raw[exc.start]:02x} at byte offset {exc.start})",
                        f"line {line}") from None
    try:
        return only_text(json.loads(text), path, None)
    except json.JSONDecodeError as exc:
        raise DataError(path, f"invalid JSON ({exc.msg} at line {exc.lineno}, column {exc.colno})") from exc


def only_text(value, path: Path, where: str | None):
    """`value` unchanged, unless a string in it holds an escaped lone UTF-16 surrogate (JSON allows
    "\\ud800"; it is not text, and a tokenizer fails on it with a TypeError far from the file)."""
    try:
        json.dumps(value, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError as exc:
        raise DataError(path, f"a text holds a lone UTF-16 surrogate ({exc.object[exc.start:exc.end]!a}), which "
                              "is not a character; fix the escape in the file", where) from None
    return value


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


def optional_text(record: dict[str, Any], key: str, path: Path | str, where: str) -> str | None:
    """An optional string field (absent or null: None); any other type is a DataError."""
    value = record.get(key)
    if value is not None and not isinstance(value, str):
        raise DataError(path, f"field {key!r} must be a string, got {type(value).__name__}", where)
    return value


def record_id(record: dict[str, Any], key: str, path: Path | str, where: str) -> str | None:
    """An optional id field: a string or an integer (a list or object is a DataError)."""
    value = record.get(key)
    if value is None or value == "":
        return None
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise DataError(path, f"field {key!r} must be a string or an integer, got {type(value).__name__}", where)
    return str(value)


class UniqueIds:
    """Remembers where each id was seen; a second sighting is a DataError naming both records."""

    def __init__(self, path: Path | str, what: str = "id"):
        self.path, self.what, self.seen = path, what, {}

    def add(self, value, where: str) -> None:
        if value in self.seen:
            raise DataError(self.path, f"duplicate {self.what} {value!r} (first at {self.seen[value]})", where)
        self.seen[value] = where
