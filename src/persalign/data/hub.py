"""Records from a local JSONL file or, with `hf:NAME[:CONFIG][@SPLIT]`, the Hugging Face hub.

The hub path needs the `datasets` package and a network; it is imported only
when used, and tests replace `datasets.load_dataset` with a local stand-in.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from persalign.core.errors import DataError
from persalign.data.jsonio import read_jsonl


def parse_hub_path(path: str) -> tuple[str, str | None, str]:
    spec = path[len("hf:"):]
    spec, _, split = spec.partition("@")
    name, _, config = spec.partition(":")
    return name, config or None, split or "train"


def iter_records(path: str, default_config: str | None = None) -> Iterator[tuple[str, dict[str, Any]]]:
    """(where, record) pairs; `where` names the line (file) or the row (hub) for error messages."""
    if str(path).startswith("hf:"):
        name, config, split = parse_hub_path(str(path))
        try:
            import datasets
        except ImportError as exc:
            raise DataError(path, "reading from the hub needs the `datasets` package: pip install datasets") from exc
        try:
            rows = datasets.load_dataset(name, config or default_config, split=split)
        except Exception as exc:  # network, auth, unknown name: report, don't crash
            raise DataError(path, f"could not load from the hub ({exc.__class__.__name__}: {exc})") from exc
        for index, row in enumerate(rows):
            yield f"row {index}", dict(row)
        return
    for lineno, record in read_jsonl(path):
        yield f"line {lineno}", record
