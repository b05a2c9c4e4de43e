"""Are two runs' reported numbers the same, cell by cell? Used to check the shared ARGS pass (issue #42) on a
real study: a subset of the study re-run with `args.shared_pass=false` (every ARGS cell decoded alone) must
report what the study reported for the cells both hold, except rows where either run counted a near-tie.

Compared per cell both runs hold: the chosen λ and its whole validation curve (lambda.json), every summary
number a reader sees (the view of tests/golden.py: timings, memory and the work records left out) and every
row's generation and scores. A row whose generation differs is excused only where either run counted a
near-tie in it (`args_near_ties`), and then the cell's summary may differ too; it is listed either way.

    python benchmarks/compare_runs.py RUN_DIR_A RUN_DIR_B     # exit 1: an unexcused difference; 2: a side is
                                                              # missing, empty or damaged, or no cell is shared
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.golden import view  # noqa: E402  (the view a reader sees; one definition for tests and this check)


class RunProblem(Exception):
    """A side that cannot be compared: missing, empty, not a run, or a damaged file (named)."""


def read_json(path: Path, kind: type = dict):
    """A JSON file of the expected kind, or RunProblem naming it."""
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as error:
        raise RunProblem(f"{path}: unreadable ({type(error).__name__}: {str(error)[:80]})") from error
    if not isinstance(value, kind):
        raise RunProblem(f"{path}: holds {type(value).__name__}, not a JSON {kind.__name__}")
    return value


def cell_folders(run_dir: Path) -> dict:
    """cell label/seed, as view() names it (from the cell's metrics.json) -> its folder; RunProblem for a side
    that is no run folder or holds no finished cell (a check must not pass on nothing)."""
    if not run_dir.is_dir():
        raise RunProblem(f"{run_dir}: no such folder" if not run_dir.exists() else f"{run_dir}: not a folder")
    out = {}
    for path in sorted(run_dir.glob("cells/*/*/seed-*/metrics.json")):
        metrics = read_json(path)
        if "decoder" not in metrics or "seed" not in metrics:
            raise RunProblem(f"{path}: no decoder or seed: not a cell's metrics")
        if not (path.parent / "rows.jsonl").is_file():
            raise RunProblem(f"{path.parent / 'rows.jsonl'}: missing beside a finished cell's metrics.json")
        out[f"{metrics['decoder']} | seed {metrics['seed']}"] = path.parent
    if not out:
        raise RunProblem(f"{run_dir}: no finished cell (cells/*/*/seed-*/metrics.json): not a run folder, or empty")
    return out


def lambda_choices(folders: dict) -> dict:
    """cell label/seed -> its stored λ choice (λ and curve)."""
    out = {}
    for label, folder in folders.items():
        if (folder / "lambda.json").exists():
            choice = read_json(folder / "lambda.json")
            if "lambda" not in choice:
                raise RunProblem(f"{folder / 'lambda.json'}: no 'lambda'")
            out[label] = {"lambda": choice["lambda"], "curve": choice.get("curve", {})}
    return out


def near_tie_ids(folders: dict) -> dict:
    """cell label/seed -> ids of rows in which the shared pass counted a near-tie."""
    out = {}
    for label, folder in folders.items():
        path = folder / "rows.jsonl"
        try:
            rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
            out[label] = {r["id"] for r in rows if r.get("args_near_ties", 0)}
        except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError, AttributeError) as error:
            raise RunProblem(f"{path}: damaged ({type(error).__name__}: {str(error)[:80]})") from error
    return out


def load(run_dir: Path) -> tuple[dict, dict, dict]:
    """(view, λ choices, near-tie ids) of one side; RunProblem names what is wrong."""
    folders = cell_folders(run_dir)
    lambdas, ties = lambda_choices(folders), near_tie_ids(folders)
    try:
        return view(run_dir), lambdas, ties
    except Exception as error:  # noqa: BLE001 — persalign's own readers name the damaged file
        raise RunProblem(f"{run_dir}: {type(error).__name__}: {str(error)[:160]}") from error


def differences(a, b, where: str = "", rel: float = 1e-9) -> list[str]:
    """Every place two JSON values differ (floats to `rel`, relative), as 'where: a != b'."""
    if isinstance(a, dict) and isinstance(b, dict):
        return [d for k in sorted(set(a) | set(b), key=str)
                for d in differences(a.get(k), b.get(k), f"{where}/{k}", rel)]
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [d for i, (x, y) in enumerate(zip(a, b)) for d in differences(x, y, f"{where}[{i}]", rel)]
    if isinstance(a, float) and isinstance(b, float):
        return [] if abs(a - b) <= rel * max(1.0, abs(a), abs(b)) else [f"{where}: {a!r} != {b!r}"]
    return [] if a == b else [f"{where}: {a!r} != {b!r}"]


def compare_cell(label: str, cells: tuple[dict, dict], ties: set, lambdas: tuple) -> tuple[list[str], list[str]]:
    """(unexcused differences, excused ones) of one cell."""
    rows_a = {r["id"]: r for r in cells[0]["rows"]}
    rows_b = {r["id"]: r for r in cells[1]["rows"]}
    row_diffs = {i: differences(rows_a.get(i), rows_b.get(i), f"{label} row {i}")
                 for i in rows_a.keys() | rows_b.keys()}
    excused = [d for i, ds in row_diffs.items() if i in ties for d in ds]
    unexcused = [d for i, ds in row_diffs.items() if i not in ties for d in ds]
    rest = differences({k: v for k, v in cells[0].items() if k != "rows"},
                       {k: v for k, v in cells[1].items() if k != "rows"}, label)
    (excused if excused and not unexcused else unexcused).extend(rest)
    # the curve's inverse perplexity is a mean of exp(float32 log-prob sums / length); a sum scored in another
    # batch (the shared pass scores every method's texts together) moves in its 7th digit, the mean in its 9th
    unexcused += differences(lambdas[0], lambdas[1], f"{label} λ choice", rel=1e-6)
    return unexcused, excused


def main(run_a: Path, run_b: Path) -> int:
    """0: every cell both runs hold reports the same; 1: an unexcused difference; 2: a side cannot be compared
    (missing, empty, damaged) or the runs share no cell — one line each, never a pass on nothing."""
    try:
        (view_a, lambdas_a, ties_a), (view_b, lambdas_b, ties_b) = load(run_a), load(run_b)
    except RunProblem as problem:
        print(f"compare_runs: cannot compare: {problem}", file=sys.stderr)
        return 2
    views, lambdas = (view_a, view_b), (lambdas_a, lambdas_b)
    shared = sorted(views[0].keys() & views[1].keys())
    print(f"{run_a} vs {run_b}: {len(shared)} cells in both "
          f"({len(views[0]) - len(shared)} only in the first, {len(views[1]) - len(shared)} only in the second)")
    if not shared:
        print("compare_runs: the runs share no cell: nothing compared", file=sys.stderr)
        return 2
    bad = 0
    for label in shared:
        ties = ties_a.get(label, set()) | ties_b.get(label, set())
        unexcused, excused = compare_cell(label, (views[0][label], views[1][label]), ties,
                                          (lambdas[0].get(label), lambdas[1].get(label)))
        rows = len(views[0][label]["rows"])
        checked = "λ curve compared" if lambdas[0].get(label) and lambdas[1].get(label) else "no λ curve"
        print(f"  {label}: λ {views[0][label]['lambda']} / {views[1][label]['lambda']} ({checked}), {rows} rows, "
              f"{len(ties)} with a near-tie; {'identical' if not unexcused and not excused else ''}"
              f"{f'{len(excused)} differences in near-tie rows ' if excused else ''}"
              f"{f'{len(unexcused)} UNEXCUSED differences' if unexcused else ''}")
        for line in (unexcused + excused)[:6]:
            print(f"      {line}")
        bad += bool(unexcused)
    print(f"{bad} of {len(shared)} cells differ outside near-ties")
    return 1 if bad else 0


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    sys.exit(main(Path(sys.argv[1]), Path(sys.argv[2])))
