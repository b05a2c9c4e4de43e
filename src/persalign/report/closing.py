"""The report's last two sections: sample generations (what each deployment wrote for a few queries,
beside what the user wrote) and what to do next (users needed, the commands that go further).

Like lm-evaluation-harness's `--log_samples`, every row of every cell is in the run directory
(cells/…/rows.jsonl, with the prompt as the policy read it) and one command away as one file:

    persalign export runs/demo/demo --format rows -o rows.jsonl
"""

from __future__ import annotations

import pandas as pd

from persalign.analysis.intervals import MIN_USERS
from persalign.runner.store import Cell, RunStore

SAMPLE_QUERIES = 3
MAX_CHARS = 240


def _clip(text: str | None) -> str:
    if text is None:
        return "–"
    text = " ".join(str(text).split())
    text = text if len(text) <= MAX_CHARS else text[:MAX_CHARS - 1] + "…"
    return text.replace("|", "\\|") or "(empty)"


def _rows_by_label(store: RunStore, cells: pd.DataFrame, order: list[str]) -> dict[str, dict[str, dict]]:
    """label -> {item id: row} for the cells that generate, in the report's row order."""
    out = {}
    for label in [label for label in order if label in set(cells["decoder"])]:
        cell = cells[cells["decoder"] == label].sort_values("seed").iloc[0]  # its first seed
        rows = store.read_rows(Cell(cell["policy"], cell["stored_decoder"], int(cell["seed"])))
        if any(r.get("generation") is not None for r in rows):
            out[label] = {r["id"]: r for r in rows}
    return out


def sample_generations(store: RunStore, frame: pd.DataFrame, order: list[str]) -> list[str]:
    """Per policy, the first SAMPLE_QUERIES query items (by id) of the first seed: input, the user's own
    text, and every generating deployment's output, in the report's row order."""
    parts = []
    for policy in dict.fromkeys(frame["policy"]):
        written = _rows_by_label(store, frame[frame["policy"] == policy], order)
        ids = sorted(set.intersection(*(set(r) for r in written.values())))[:SAMPLE_QUERIES] if written else []
        if not ids:
            continue
        parts += ["", f"## Sample generations ({policy}, each deployment's first seed)", "",
                  f"The first {len(ids)} query items by id. Every row of every cell, with the prompt as the policy "
                  "read it, is in the run directory (`persalign export RUN --format rows`)."]
        for item in ids:
            first = next(iter(written.values()))[item]
            parts += ["", f"**{item}** ({first.get('user')}): {_clip(first.get('prompt'))}", "",
                      "| Deployment | Output |", "|---|---|",
                      f"| *the user's own text* | {_clip(first.get('reference'))} |"]
            parts += [f"| {label} | {_clip(r[item].get('generation'))} |" for label, r in written.items()]
    return parts


def what_next(run_dir, frame: pd.DataFrame) -> list[str]:
    """Where to go from this report: more users if intervals were missing, planning, export."""
    users = int(frame["users"].max()) if "users" in frame and len(frame) else 0
    steps = []
    if users < MIN_USERS:
        steps.append(f"Add users: {users} adaptation users give no interval; {MIN_USERS} are needed (raise "
                     "`split.adapt_fraction`, or bring more users).")
    steps += [f"Plan a study that separates what matters to you: `persalign plan CONFIG --from-run {run_dir}` "
              "gives the users and queries needed to detect a given ROUGE-1 difference, and the time it takes.",
              f"Analyse further in pandas: `persalign export {run_dir} --format csv` (one tidy row per cell, with "
              "intervals), or `--format rows` for every generation with its prompt.",
              "Read docs/reading-reports.md for what each table and figure can and cannot say."]
    return ["", "## What next", ""] + [f"{i}. {step}" for i, step in enumerate(steps, 1)]
