"""One reader for every file persalign writes and later reads back (issue #29).

Each reader checks that the bytes decode and that the record has the keys and
types the code is about to use. What happens on damage depends on what the
file is:

* a result (config.yaml, provenance.json, a cell's rows): `DamagedFileError`,
  one line naming the file, the problem and what to do; never used as it is;
* a cache or a recomputable part (feature shards, the embedding cache, a λ
  choice, a trained model, Best-of-N samples): `set_aside` renames it to
  NAME.damaged, prints one warning line, and the caller recomputes it.

    python -c "from persalign.core.files import read_json; print(read_json('runs/demo/provenance.json'))"
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from persalign.core.errors import OutputPathError, PersalignError

NUMBER = (int, float)


class DamagedFileError(PersalignError):
    """A file persalign wrote cannot be read back; the message names it and the remedy."""

    def __init__(self, path, problem: str, remedy: str = ""):
        self.path, self.problem = Path(path), problem
        super().__init__(f"{path}: damaged ({problem})" + (f"; {remedy}" if remedy else ""))


def warn(message: str) -> None:
    print(f"persalign: warning: {message}", file=sys.stderr)


def short(error: BaseException) -> str:
    text = str(error).splitlines()[0] if str(error) else type(error).__name__
    return text[:160]


def _read_text(path: Path) -> str:
    try:
        return path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as error:
        raise DamagedFileError(path, f"not UTF-8 text: {short(error)}") from None
    except IsADirectoryError:
        raise DamagedFileError(path, "a directory where a file belongs") from None


def read_json(path, check: Callable[[Any], str | None] | None = None) -> Any:
    """The JSON value in `path`; DamagedFileError if it does not parse or `check` names a problem."""
    path = Path(path)
    try:
        value = json.loads(_read_text(path))
    except json.JSONDecodeError as error:
        raise DamagedFileError(path, short(error)) from None
    problem = check(value) if check else None
    if problem:
        raise DamagedFileError(path, problem)
    return value


def read_yaml_mapping(path) -> dict:
    """A YAML file that must hold a mapping (persalign's own config.yaml)."""
    path = Path(path)
    try:
        value = yaml.safe_load(_read_text(path))
    except yaml.YAMLError as error:
        raise DamagedFileError(path, short(error)) from None
    if not isinstance(value, dict):
        raise DamagedFileError(path, f"holds a {type(value).__name__}, not a mapping")
    return value


def fields(required: dict[str, type | tuple], optional: dict[str, type | tuple] | None = None):
    """A check for a JSON object with these keys of these types (bool is not a number here)."""
    def check(value) -> str | None:
        if not isinstance(value, dict):
            return f"holds a {type(value).__name__}, not a JSON object"
        for key, kind in list(required.items()) + list((optional or {}).items()):
            if key not in value:
                if key in required:
                    return f"no {key!r}"
                continue
            item = value[key]
            if isinstance(item, bool) and bool not in (kind if isinstance(kind, tuple) else (kind,)):
                return f"{key!r} is {item!r}, not {_kind_name(kind)}"
            if not isinstance(item, kind):
                return f"{key!r} is {item!r:.40}, not {_kind_name(kind)}"
        return None
    return check


def _kind_name(kind) -> str:
    kinds = kind if isinstance(kind, tuple) else (kind,)
    return " or ".join({int: "an integer", float: "a number", str: "text", list: "a list", dict: "an object",
                        bool: "true/false", type(None): "null"}.get(k, k.__name__) for k in kinds)


def read_tensors(path) -> dict:
    """A safetensors file as {name: tensor}."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    try:
        return load_file(str(path))
    except (SafetensorError, OSError, ValueError, RuntimeError) as error:
        raise DamagedFileError(path, short(error)) from None


@contextlib.contextmanager
def naming(path):
    """An OSError raised while writing `path` names it: a full disk fails a write without a file name, and the
    one-line error would then say "a file"."""
    try:
        yield
    except OSError as error:
        if error.filename is None:
            raise OSError(error.errno, error.strerror or str(error), str(path)) from error
        raise


CONTROLS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")  # C0 but tab and newline, DEL, C1


def escape_controls(text: str) -> str:
    """Control characters as visible escapes (ESC -> \\x1b): text from data never retitles, recolours or rewrites
    a terminal (OSC, CSI, backspace) nor hides in a Markdown or HTML report."""
    return CONTROLS.sub(lambda match: f"\\x{ord(match.group()):02x}", text)


def writable_target(path) -> Path:
    """`path` if persalign may write it: a new path or a regular file. A device (/dev/null, /dev/full), a FIFO,
    a socket or a folder is refused in one line — the rename below would replace the device node itself."""
    path = Path(path)
    if path.exists() and not path.is_file():
        kind = "a folder" if path.is_dir() else "not a regular file (a device, FIFO or socket)"
        raise OutputPathError(f"{path}: {kind}; persalign writes only to regular files or new paths")
    return path


def temporary_beside(path) -> Path:
    """A temporary name next to `path`, this writer's own (process id and a random part): two processes
    writing the same file — Ray tasks sharing a cache — each rename their own file, never the other's
    (with one shared NAME.tmp the second rename found it gone: CI, stop 67)."""
    path = Path(path)
    return path.with_name(f"{path.name}.{os.getpid()}-{secrets.token_hex(4)}.tmp")


def write_atomic(path, content: str | bytes) -> None:
    """Write through a temporary file and a rename: a kill leaves the old file or the new, never half."""
    path = writable_target(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = temporary_beside(path)
    try:
        with naming(path):  # the file being written, not this writer's temporary name
            tmp.write_bytes(content.encode("utf-8") if isinstance(content, str) else content)
        tmp.replace(path)
    finally:
        tmp.unlink(missing_ok=True)  # a failed write leaves no stray file (every writer's name is new)


def set_aside(path, problem: str, what: str = "recomputed", damaged: bool = True) -> None:
    """Move a damaged cache file or folder out of the way (kept for inspection) and say so in one line;
    `damaged=False`: an intact file that goes with a damaged one (the line says which). Two processes that
    read the same damaged cache both come here: the second finds it moved, and goes on to recompute."""
    path = Path(path)
    target = path.with_name(path.name + ".damaged")
    number = 1
    while target.exists():
        number += 1
        target = path.with_name(f"{path.name}.damaged-{number}")
    state = f"damaged ({problem})" if damaged else problem
    try:
        path.replace(target)
    except FileNotFoundError:
        if path.exists() or path.is_symlink():
            raise
        warn(f"{path}: {state}; another process moved it aside first, and {what}")
        return
    warn(f"{path}: {state}; moved to {target.name} and {what}")
