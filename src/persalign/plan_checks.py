"""`persalign plan`'s options checked before any work, and this machine's measured rates kept between plans
(issue #56): a bad option is one line naming it and its rule; a `--from-run` that is missing, empty, damaged or
a run of other data is refused instead of silently replaced by the stated defaults.

    persalign plan demo --budget-hours 2 --utilisation 0.4
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

from persalign.errors import ConfigError

# option -> (rule, what it must be); None always passes (the option is unset)
RULES = {
    "budget_hours": (lambda v: 0 < v <= 100_000, "a number of hours > 0 and at most 100000"),
    "gpu_tflops": (lambda v: 0 < v < math.inf, "a finite peak > 0 (TFLOP/s)"),
    "utilisation": (lambda v: 0 < v <= 1, "a share of the peak in (0, 1]"),
    "slowdown": (lambda v: 1 <= v < math.inf, "a finite factor >= 1 (this machine's seconds ÷ its floor)"),
}


def check_plan_options(args) -> None:
    for name, (ok, rule) in RULES.items():
        value = getattr(args, name)
        if value is not None and not (math.isfinite(value) and ok(value)):
            raise ConfigError(f"--{name.replace('_', '-')}: {value!r} is not allowed (must be {rule})")


def check_from_run(run_dir: str | None, config) -> None:
    """A `--from-run` must be a finished run of the same data: its variance components are the plan's."""
    if run_dir is None:
        return
    folder = Path(run_dir)
    if not (folder / "config.yaml").is_file():
        raise ConfigError(f"--from-run {run_dir}: not a run folder (no config.yaml)")
    from persalign.config import load_config

    stored = load_config(str(folder / "config.yaml"))
    mine, theirs = ((c.data.dataset, str(c.data.path or "")) for c in (config, stored))
    if Path(mine[1]).name != Path(theirs[1]).name or mine[0] != theirs[0]:
        raise ConfigError(f"--from-run {run_dir}: a run of other data ({theirs[0]} {theirs[1] or '(built in)'}; this "
                          f"plan: {mine[0]} {mine[1] or '(built in)'}): its users' spread is not this data's")
    from persalign.planning_power import components_from_run

    if components_from_run(run_dir) is None:
        raise ConfigError(f"--from-run {run_dir}: no finished ICL cell beside a reward method or zero-shot to take "
                          "the users' spread from (empty or partial run)")


def cached_rates(measure, cache_dir: str | None, key: str) -> dict:
    """`measure()` once per machine, model, kernel set and thread count, then read back (the rates do not change
    between plans); says what it is doing while it measures (about a minute)."""
    from persalign.models.aliases import default_cache_dir

    path = default_cache_dir(cache_dir) / "machine_rates" / f"{key}.json"
    if path.is_file():
        try:
            return json.loads(path.read_text())
        except (OSError, ValueError):
            pass  # a damaged record is measured again
    print(f"measuring this machine's rates ({key}; about a minute, kept in {path} for later plans) ...",
          file=sys.stderr, flush=True)
    rates = measure()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(rates))
    return rates
