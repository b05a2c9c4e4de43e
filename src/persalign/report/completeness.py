"""Which planned cells a report is missing: a run interrupted, a cell folder deleted (damaged cells are
listed by the store on their own, `RunStore.problems`).

Every report, export and results.json lists them, and the verdict says it rests on a partial run;
before, a cell that was never finished silently disappeared and the verdict ranked what was left.
The plan is the one `persalign run` made from the run's stored config.yaml (runs that `persalign run`
wrote carry provenance.json; a hand-made folder without it has no plan to compare with).

    persalign report runs/demo/demo
"""

from __future__ import annotations

from persalign.core.errors import PersalignError
from persalign.runner.store import RunStore


def absent_cells(store: RunStore, finished: set[tuple]) -> list[str]:
    """'POLICY / DEPLOYMENT / seed N' of each planned cell not among the `finished` (policy, decoder, seed)
    keys (empty: complete)."""
    if not (store.root / "provenance.json").exists():
        return []
    from persalign.core.config import RunConfig
    from persalign.core.typed_yaml import from_dict
    from persalign.runner.plan import plan

    try:
        planned = plan(from_dict(RunConfig, store.config()))
    except PersalignError as error:  # a config this version cannot plan: say so rather than guess
        return [f"the plan of {store.root / 'config.yaml'} could not be rebuilt ({error})"]
    damaged = {problem.split(":")[0] for problem in getattr(store, "problems", [])}  # listed on their own
    return [f"{p.cell.policy} / {p.cell.decoder} / seed {p.cell.seed}" for p in planned
            if (p.cell.policy, p.cell.decoder, p.cell.seed) not in finished and str(p.cell.relpath()) not in damaged]


def finished_keys(frame) -> set[tuple]:
    """(policy, stored decoder, seed) of every usable cell of a report frame (report.markdown.results_frame)."""
    if frame.empty:
        return set()
    return set(zip(frame["policy"], frame["stored_decoder"], frame["seed"].astype(int)))


def partial_run_lines(absent: list[str], damaged: int = 0) -> list[str]:
    """The report's warning, placed before the verdict it qualifies."""
    if not absent and not damaged:
        return []
    shown = "; ".join(absent[:8]) + (f"; and {len(absent) - 8} more" if len(absent) > 8 else "")
    what = [f"{len(absent)} planned cell{'s' if len(absent) != 1 else ''} {'are' if len(absent) != 1 else 'is'} "
            f"absent and in no table: {shown}"] if absent else []
    what += [f"{damaged} damaged cell{'s' if damaged != 1 else ''} skipped (listed at the end)"] if damaged else []
    return ["", f"**Warning: a partial run.** {'; '.join(what)}. The verdict below ranks only what was finished; "
                "re-run the same command to complete it."]
