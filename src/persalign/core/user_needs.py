"""How many adaptation users (and reward methods) each analysis needs before it prints an interval or a test.

The thresholds live here, low in the package, so data and runner code can warn before any work; the
analyses (analysis/intervals.py, analysis/paired.py) read them from here. They are the sizes the
procedures were checked at (tests/test_intervals.py, test_paired.py):
below them no interval keeps its stated 95 % coverage, so none is printed. `data summary` and the start
of `run` list them against the data, and warn where the data has fewer.

    persalign data summary demo
"""

from __future__ import annotations

# The fewest users whose mean interval covered 93-97 % for skewed and bounded values in the simulation
# (at 6 users, accuracies from 6 queries each near 80 %: 91 %).
MIN_USERS = 8
MIN_PAIRED_USERS = 6  # Finding 3's cross-fitted interval: null false positives and coverage checked from here
# The fewest methods whose correlation interval covered 93-97 %.
MIN_METHODS = {"pearson": 4, "spearman": 8, "kendall": 6}


def needs_lines(adapt_users: int, reward_methods: int) -> list[str]:
    """One line per analysis: what it needs, what the data / config has, and a warning where it falls short."""
    def line(what: str, needed: int, have: int, unit: str) -> str:
        mark = "ok" if have >= needed else f"WARNING: {have} {unit}, so no interval"
        return f"  {what}: {needed} {unit} ({mark})"

    lines = ["analyses and the adaptation users / reward methods they need:",
             line("each deployment's mean and its Δ vs greedy (95% interval)", MIN_USERS, adapt_users,
                  "adaptation users"),
             line("best ICL − best reward method (cross-fitted interval)", MIN_PAIRED_USERS, adapt_users,
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
    if adapt_users < MIN_PAIRED_USERS:
        short.append(f"best ICL − best reward method ({MIN_PAIRED_USERS} needed)")
    return (f"warning: {adapt_users} adaptation users give no interval for " + " nor for ".join(short)
            + "; the tables will show means only (persalign data summary CONFIG lists what each analysis needs)")
