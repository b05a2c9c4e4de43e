"""How many adaptation users (and reward methods) each analysis needs before it prints an interval or a test.

The thresholds are the ones the procedures were checked at (tests/test_intervals.py, test_paired.py):
below them no interval keeps its stated 95 % coverage, so none is printed. `data summary` and the start
of `run` list them against the data, and warn where the data has fewer.

    persalign data summary demo
"""

from __future__ import annotations

from persalign.analysis import paired
from persalign.analysis.intervals import MIN_METHODS, MIN_USERS


def needs_lines(adapt_users: int, reward_methods: int) -> list[str]:
    """One line per analysis: what it needs, what the data / config has, and a warning where it falls short."""
    def line(what: str, needed: int, have: int, unit: str) -> str:
        mark = "ok" if have >= needed else f"WARNING: {have} {unit}, so no interval"
        return f"  {what}: {needed} {unit} ({mark})"

    lines = ["analyses and the adaptation users / reward methods they need:",
             line("each deployment's mean and its Δ vs greedy (95% interval)", MIN_USERS, adapt_users,
                  "adaptation users"),
             line("best ICL − best reward method (cross-fitted interval)", paired.MIN_USERS, adapt_users,
                  "adaptation users")]
    lines += [line(f"{name.capitalize()} correlation across reward methods", needed, reward_methods,
                   "reward methods") for name, needed in sorted(MIN_METHODS.items(), key=lambda kv: kv[1])]
    if adapt_users < MIN_USERS:
        lines.append(f"  -> {adapt_users} adaptation users: tables show means only. Raise split.adapt_fraction or "
                     "add users; `persalign plan CONFIG` says how many users detect a given difference.")
    return lines


def shortfall_line(adapt_users: int) -> str | None:
    """A warning for the start of a run whose adaptation users are too few for an interval, else None."""
    if adapt_users >= MIN_USERS:
        return None
    short = [f"any mean or Δ vs greedy ({MIN_USERS} needed)"]
    if adapt_users < paired.MIN_USERS:
        short.append(f"best ICL − best reward method ({paired.MIN_USERS} needed)")
    return (f"warning: {adapt_users} adaptation users give no interval for " + " nor for ".join(short)
            + "; the tables will show means only (persalign data summary CONFIG lists what each analysis needs)")
