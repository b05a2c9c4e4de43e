"""The run directory: resolved config, provenance, per-example rows, per-cell metrics.

    RUN_DIR/config.yaml              the resolved config (a re-run must match it)
    RUN_DIR/provenance.json          git hash, package versions, device, seeds
    RUN_DIR/cells/POLICY/DECODER/seed-N/rows.jsonl     one row per example
    RUN_DIR/cells/POLICY/DECODER/seed-N/timings.jsonl  seconds per batch and stage
    RUN_DIR/cells/POLICY/DECODER/seed-N/metrics.json   written last: the cell is done

Rows are appended one batch at a time. A run killed mid-write leaves at most
one partial batch, which is dropped on resume; batches are fixed by the
example order, so a resumed cell recomputes exactly what a fresh run would.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

import yaml

from persalign.core.errors import ConfigError, DataError, PersalignError
from persalign.core.files import DamagedFileError, fields, naming, read_json, read_yaml_mapping, set_aside, write_atomic
from persalign.runner.store_checks import metrics_problem, parse_line, rows_problem, short


@dataclass(frozen=True)
class Cell:
    policy: str
    decoder: str
    seed: int

    def relpath(self) -> Path:
        return Path("cells") / folder_name(self.policy) / folder_name(self.decoder) / f"seed-{self.seed}"


def folder_name(text: str) -> str:
    """A directory name for a label: never '.', '..' or hidden (a label of '..' must not leave the run dir)."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("_").lstrip(".") or "_"


def check_distinct_dirs(cells: list[Cell]) -> None:
    """Two different labels that map to one directory would mix their rows: refuse them."""
    seen: dict[Path, Cell] = {}
    for cell in cells:
        other = seen.setdefault(cell.relpath(), cell)
        if other != cell:
            raise ConfigError(f"labels {other.decoder!r} and {cell.decoder!r} map to the same result folder "
                              f"{cell.relpath()}; give one of them another `label`")


CELL_AXES = ("policies", "decoders", "methods", "seeds")
COMPLETION_MARKERS = ("metrics.json", "head.json")  # a cell / a trained model is complete once these exist


def without_new_unset(new, old):
    """`new` less the settings `old` predates and `new` leaves unset (None) or switched off (False, the
    behaviour before a switch existed): a run made before a setting existed resumes under code that has it, as
    long as it is not set. (`generation.cuda_graph: false` stopped `make demo` on a run dir made before it.)"""
    if not isinstance(new, dict) or not isinstance(old, dict):
        return new
    return {k: without_new_unset(v, old.get(k)) for k, v in new.items()
            if k in old or (v is not None and v is not False)}


def extends(old: dict, new: dict) -> bool:
    """True if `new` keeps every setting of `old` and only adds entries to the cell axes."""
    same_rest = {k: v for k, v in old.items() if k not in CELL_AXES} == \
        {k: v for k, v in new.items() if k not in CELL_AXES}
    return same_rest and all(entry in new.get(axis, []) for axis in CELL_AXES for entry in old.get(axis, []))


def config_differences(old, new, where: str = "") -> list[str]:
    """'key: old → new' for each setting that differs (dotted keys; lists compared whole)."""
    if isinstance(old, dict) and isinstance(new, dict):
        return [line for key in dict.fromkeys([*old, *new])
                for line in config_differences(old.get(key), new.get(key), f"{where}.{key}" if where else key)]
    return [] if old == new else [f"{where}: {old!r} → {new!r}"]


def check_same_inputs(root: Path, runs: list[dict], inputs: dict[str, str]) -> None:
    """Refuse to resume cells computed from input files that have changed since (or gone)."""
    earlier = next((run["inputs"] for run in reversed(runs) if isinstance(run, dict) and "inputs" in run), None)
    if not earlier:
        return
    for path, digest in earlier.items():
        if inputs.get(path) != digest:
            what = "is gone" if path not in inputs else "has changed"
            raise ConfigError(f"{root}: input file {path} {what} since its cells were computed (sha256 "
                              f"{digest[:12]} in provenance.json); resume with the same data, or write to another "
                              "folder (-o)")
    added = sorted(set(inputs) - set(earlier))
    if added:
        raise ConfigError(f"{root}: its cells were computed without input file {added[0]} (provenance.json); "
                          "resume with the same data, or write to another folder (-o)")


class RunStore:
    def __init__(self, root: str | Path):
        self.root = Path(root)

    def prepare(self, config: dict, provenance: dict) -> None:
        """Create the run dir, or check that an existing one was made by the same config.

        A config that only adds cells (more policies, decoders, methods or seeds;
        everything else unchanged) extends the run: finished cells stay valid.
        """
        config_path = self.root / "config.yaml"
        text = yaml.safe_dump(config, sort_keys=False)
        if config_path.exists():
            old = _read_run_file(config_path, read_yaml_mapping)
            new = without_new_unset(yaml.safe_load(text), old)
            if old != new and not extends(old, new):
                differences = config_differences(old, new)
                changed = [d for d in differences if d.split(":")[0] not in CELL_AXES] or \
                    [f"{d} drops cells" for d in differences]
                raise ConfigError(
                    f"{self.root} holds results of a different config ({'; '.join(changed[:3])}, against its "
                    f"{config_path.name}); re-run with the same config to resume "
                    "(adding policies, decoders, methods or seeds is allowed), or choose another output folder (-o)"
                )
        history = self.root / "provenance.json"
        runs = _read_run_file(history, lambda p: read_json(p, fields({"runs": list})))["runs"] \
            if history.exists() else []
        check_same_inputs(self.root, runs, provenance.get("inputs", {}))
        write_atomic(config_path, text)
        write_atomic(history, json.dumps({"runs": runs + [provenance]}, indent=2))

    def config(self) -> dict:
        return _read_run_file(self.root / "config.yaml", read_yaml_mapping)

    def cell_dir(self, cell: Cell) -> Path:
        return self.root / cell.relpath()

    def is_complete(self, cell: Cell) -> bool:
        """metrics.json is there and the rows it summarises are all on disk (a cell whose rows.jsonl lost
        lines, or whose metrics.json is unreadable, is unfinished: resumed, never used as it is)."""
        path = self.cell_dir(cell) / "metrics.json"
        if not path.exists():
            return False
        try:
            metrics = read_json(path, metrics_problem)
            return rows_problem(metrics, self.read_rows(cell)) is None
        except (ValueError, DataError, DamagedFileError):
            return False

    def completed_batches(self, cell: Cell, batches: list[list[str]]) -> set[int]:
        """Batches whose rows are all on disk; rows of incomplete batches are removed."""
        try:
            rows = self.read_rows(cell, _repair=True)
            self.read_jsonl(cell, "timings.jsonl", repair=True)
        except DataError as error:  # a damaged result is never used: set aside (kept) and recomputed
            damaged = Path(error.path).name
            for name in ("rows.jsonl", "timings.jsonl", "metrics.json"):
                if (self.cell_dir(cell) / name).exists():
                    problem = error.problem if name == damaged else f"intact, but its cell's {damaged} is damaged"
                    set_aside(self.cell_dir(cell) / name, problem, "the cell is recomputed", damaged=name == damaged)
            rows = []
        by_batch: dict[int, list[str]] = {}
        for row in rows:
            by_batch.setdefault(row["batch"], []).append(row["id"])
        done = {b for b, ids in by_batch.items() if b < len(batches) and sorted(ids) == sorted(batches[b])}
        if len(done) != len(by_batch):
            kept = [row for row in rows if row["batch"] in done]
            self._rewrite(cell, "rows.jsonl", kept)
            kept = [t for t in self.read_jsonl(cell, "timings.jsonl") if t["batch"] in done]
            self._rewrite(cell, "timings.jsonl", kept)
        return done

    def append(self, cell: Cell, name: str, records: list[dict]) -> None:
        path = self.cell_dir(cell) / name
        path.parent.mkdir(parents=True, exist_ok=True)
        with naming(path), path.open("a", encoding="utf-8") as handle:
            handle.write("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records))
            handle.flush()
            os.fsync(handle.fileno())

    def read_rows(self, cell: Cell, _repair: bool = False) -> list[dict]:
        return self.read_jsonl(cell, "rows.jsonl", _repair)

    def read_jsonl(self, cell: Cell, name: str, repair: bool = False) -> list[dict]:
        """Complete lines of a cell's JSONL file; a last line cut by a kill (even inside a multibyte
        character) is dropped, and with `repair` removed from the file. Works on bytes: a torn
        UTF-8 sequence must never stop a resume."""
        path = self.cell_dir(cell) / name
        if not path.exists():
            return []
        complete, _, torn = path.read_bytes().rpartition(b"\n")
        records = [parse_line(path, number, line) for number, line in enumerate(complete.split(b"\n"), 1)
                   if complete or line]
        if repair and torn:
            self._rewrite(cell, name, records)
        return records

    def rewrite_rows(self, cell: Cell, rows: list[dict]) -> None:
        self._rewrite(cell, "rows.jsonl", rows)

    def _rewrite(self, cell: Cell, name: str, records: list[dict]) -> None:
        write_atomic(self.cell_dir(cell) / name, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records))

    def write_metrics(self, cell: Cell, metrics: dict) -> None:
        write_atomic(self.cell_dir(cell) / "metrics.json", json.dumps(metrics, indent=2))

    def read_files(self, relative: str | Path) -> dict[str, bytes]:
        """Every file under RUN_DIR/`relative` as {path relative to RUN_DIR: bytes} (unfinished .tmp files left out)."""
        base = self.root / relative
        files = (sorted(p for p in base.rglob("*") if p.is_file() and not p.name.endswith(".tmp"))
                 if base.exists() else [])
        return {str(p.relative_to(self.root)): p.read_bytes() for p in files}

    def write_files(self, files: dict[str, bytes]) -> None:
        """Write files another process returned (a Ray task), each atomically, the completion markers
        (metrics.json, head.json) last: a kill in between leaves an incomplete cell or model, never a
        complete one with parts missing."""
        for relative in sorted(files, key=lambda name: Path(name).name in COMPLETION_MARKERS):
            path = (self.root / relative).resolve()
            if self.root.resolve() not in path.parents:
                raise PersalignError(f"refusing to write {relative!r}: outside the run directory {self.root}")
            write_atomic(path, files[relative])

    def all_metrics(self) -> list[dict]:
        """Every finished cell's metrics; damaged cells are skipped and described in `self.problems`."""
        self.problems: list[str] = []
        found = []
        for path in sorted(self.root.glob("cells/*/*/*/metrics.json")):
            try:
                metrics = read_json(path, metrics_problem)
                if not (path.parent / "rows.jsonl").exists():
                    raise ValueError("rows.jsonl is missing beside it")
                rows = self.read_jsonl(Cell(metrics["policy"], metrics["decoder"], metrics["seed"]), "rows.jsonl")
                problem = rows_problem(metrics, rows)
                if problem:
                    raise ValueError(problem)
            except (ValueError, DataError, DamagedFileError) as error:
                self.problems.append(f"{path.parent.relative_to(self.root)}: skipped ({short(error)})")
                continue
            found.append(metrics)
        return found

    def check_is_run(self) -> None:
        """A clear error unless `root` is a run directory with a readable config."""
        if not self.root.exists():
            raise PersalignError(f"{self.root}: no such run directory")
        runs = sorted(p.parent for p in self.root.glob("*/config.yaml")) if self.root.is_dir() else []
        if not (self.root / "config.yaml").exists() and runs:
            raise PersalignError(f"{self.root}: a study directory; report one of its runs: "
                                 + ", ".join(str(run) for run in runs))
        if not self.root.is_dir() or not (self.root / "config.yaml").exists():
            raise PersalignError(f"{self.root}: not a run directory (no config.yaml; give the folder "
                                 "`persalign run -o` wrote)")
        config = self.config()
        if "data" not in config:
            raise PersalignError(f"{self.root / 'config.yaml'}: damaged (not a persalign run config)")


def _read_run_file(path: Path, reader):
    """config.yaml and provenance.json say which config and inputs the cells came from: without them no
    resume can be checked, so damage stops the run (the cells themselves are kept)."""
    try:
        return reader(path)
    except DamagedFileError as error:
        raise DamagedFileError(path, error.problem, "restore it from a copy, or write to another folder (-o); "
                               "the cells in this folder are kept") from None
