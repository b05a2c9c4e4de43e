"""Are two runs' reported numbers the same, cell by cell? Used to check the shared ARGS pass (issue #42) on a
real study: a subset of the study re-run with `args.shared_pass=false` (every ARGS cell decoded alone) must
report what the study reported for the cells both hold, except rows where either run counted a near-tie.

Compared per cell both runs hold: the chosen λ and its whole validation curve (lambda.json), every summary
number a reader sees (the view of tests/golden.py: timings, memory and the work records left out) and every
row's generation and scores. A row whose generation differs is excused only where either run counted a
near-tie in it (`args_near_ties`), and then the cell's summary may differ too; it is listed either way.

    python benchmarks/compare_runs.py RUN_DIR_A RUN_DIR_B     # exit 1 if an unexcused difference is found
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.golden import view  # noqa: E402  (the view a reader sees; one definition for tests and this check)


def cell_folders(run_dir: Path) -> dict:
    """cell label/seed, as view() names it (from the cell's metrics.json) -> its folder."""
    out = {}
    for path in sorted(run_dir.glob("cells/*/*/seed-*/metrics.json")):
        metrics = json.loads(path.read_text())
        out[f"{metrics['decoder']} | seed {metrics['seed']}"] = path.parent
    return out


def lambda_choices(run_dir: Path) -> dict:
    """cell label/seed -> its stored λ choice (λ and curve)."""
    out = {}
    for label, folder in cell_folders(run_dir).items():
        if (folder / "lambda.json").exists():
            choice = json.loads((folder / "lambda.json").read_text())
            out[label] = {"lambda": choice["lambda"], "curve": choice.get("curve", {})}
    return out


def near_tie_ids(run_dir: Path) -> dict:
    """cell label/seed -> ids of rows in which the shared pass counted a near-tie."""
    out = {}
    for label, folder in cell_folders(run_dir).items():
        rows = [json.loads(line) for line in (folder / "rows.jsonl").read_text().splitlines() if line.strip()]
        out[label] = {r["id"] for r in rows if r.get("args_near_ties", 0)}
    return out


def differences(a, b, where: str = "", rel: float = 1e-9) -> list[str]:
    """Every place two JSON values differ (floats to `rel`, relative), as 'where: a != b'."""
    if isinstance(a, dict) and isinstance(b, dict):
        return [d for k in sorted(set(a) | set(b), key=str) for d in differences(a.get(k), b.get(k), f"{where}/{k}", rel)]
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [d for i, (x, y) in enumerate(zip(a, b)) for d in differences(x, y, f"{where}[{i}]", rel)]
    if isinstance(a, float) and isinstance(b, float):
        return [] if abs(a - b) <= rel * max(1.0, abs(a), abs(b)) else [f"{where}: {a!r} != {b!r}"]
    return [] if a == b else [f"{where}: {a!r} != {b!r}"]


def compare_cell(label: str, cells: tuple[dict, dict], ties: set, lambdas: tuple) -> tuple[list[str], list[str]]:
    """(unexcused differences, excused ones) of one cell."""
    rows_a = {r["id"]: r for r in cells[0]["rows"]}
    rows_b = {r["id"]: r for r in cells[1]["rows"]}
    row_diffs = {i: differences(rows_a.get(i), rows_b.get(i), f"{label} row {i}") for i in rows_a.keys() | rows_b.keys()}
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
    views = view(run_a), view(run_b)
    lambdas = lambda_choices(run_a), lambda_choices(run_b)
    ties_a, ties_b = near_tie_ids(run_a), near_tie_ids(run_b)
    shared = sorted(views[0].keys() & views[1].keys())
    print(f"{run_a} vs {run_b}: {len(shared)} cells in both "
          f"({len(views[0]) - len(shared)} only in the first, {len(views[1]) - len(shared)} only in the second)")
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
