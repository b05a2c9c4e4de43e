"""A run from Python: `persalign.run(config, out_dir, **overrides)` and `persalign.open_run(path)` give a `Run`
whose cells, rows and verdict are pandas DataFrames built from the stored results only (as `persalign export`
and the report read them), and `persalign.plan(config, **overrides)` gives the plan's text.

    python -c "import persalign; print(persalign.open_run('runs/demo').verdict()[0]['sentence'])"
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd

from persalign.core.config import RunConfig, load_config

if TYPE_CHECKING:
    from persalign.runner.resolve import ResolvedRun


def override_list(overrides: dict) -> list[str]:
    """`generation__batch_size=8` -> "generation.batch_size=8": a keyword per config key, `__` for its dots;
    a value that is not a string is written as JSON (which the config's YAML reads as the same value)."""
    return [f"{key.replace('__', '.')}={value if isinstance(value, str) else json.dumps(value)}"
            for key, value in overrides.items()]


def resolve(config: str | Path | RunConfig, overrides: dict) -> RunConfig:
    """A RunConfig from a file path, a built-in name or a RunConfig (overrides are for the first two)."""
    if isinstance(config, RunConfig):
        if overrides:
            raise TypeError("overrides go with a config file or name; change a RunConfig's fields directly")
        return config
    return load_config(str(config), override_list(overrides))


class Run:
    """A finished (or partial) run folder, read through its store; nothing is recomputed."""

    def __init__(self, path: str | Path):
        from persalign.runner.store import RunStore

        self.store = RunStore(path)
        self.store.check_is_run()
        self.path = self.store.root

    def __repr__(self) -> str:
        return f"Run({str(self.path)!r}: {len(self.store.all_metrics())} finished cells)"

    def config(self) -> dict:
        """The resolved config the run was made with, as stored."""
        return self.store.config()

    def cells(self, costs: bool = False) -> pd.DataFrame:
        """One tidy row per cell (`persalign export --format csv`): who, what, every metric with its interval."""
        return pd.read_csv(io.StringIO(self.export("csv", costs=costs)))

    def rows(self) -> pd.DataFrame:
        """Every generation with its cell, prompt, the user's own text and its scores (`--format rows`)."""
        text = self.export("rows")
        return pd.read_json(io.StringIO(text), lines=True) if text else pd.DataFrame()

    def verdict(self) -> list[dict]:
        """Per policy: the verdict sentence and its table (deployments ranked by ROUGE-1 against the users' own
        text, with intervals, Δ vs greedy, counted cost ÷ greedy and the Pareto front) as a DataFrame."""
        from persalign.analysis.study import analyse
        from persalign.report.markdown import results_frame
        from persalign.report.verdict import verdict_rows, verdict_sentence

        frame, out = results_frame(self.store), []
        for analysis in analyse(self.path):
            rows = verdict_rows(self.store, frame, analysis)
            if len(rows) >= 2:
                out.append({"policy": analysis.policy, "sentence": verdict_sentence(rows, analysis),
                            "table": verdict_frame(rows)})
        return out

    def deployment(self, label: str, seed: int | None = None, policy: str | None = None):
        """One of the run's deployments (the label the report shows), ready to generate for the run's users:
        `run.deployment("ICL-RAG (4-shot)").generate(user, prompts)` (persalign/api/deploy.py)."""
        from persalign.api.deploy import RunDeployment

        return RunDeployment(self, label, seed, policy)

    def report(self, format: str = "md") -> str | Path:  # noqa: A002  (the CLI's option name)
        """report.md's text ("md"), or the path of the self-contained report.html ("html")."""
        if format == "html":
            from persalign.report.html import build_html_report

            return build_html_report(self.path)
        if format != "md":
            raise ValueError(f"format {format!r}: md or html")
        from persalign.report.markdown import build_report

        return build_report(self.path)

    def export(self, format: str = "json", costs: bool = False) -> str:  # noqa: A002
        """results.json ("json"), the tidy CSV ("csv") or every row as JSON lines ("rows"), as text."""
        from persalign.core.errors import ConfigError
        from persalign.report.results import export

        if not self.store.all_metrics():
            raise ConfigError(f"{self.path}: no finished cell to export; run (or resume) it first")
        return export(self.path, format, costs=costs)


def verdict_frame(rows: list) -> pd.DataFrame:
    """The verdict table as data: one row per deployment, in rank order."""
    def bounds(ci: dict | None, name: str) -> dict:
        ci = ci or {}
        return {name: ci.get("mean"), f"{name}_low": ci.get("low"), f"{name}_high": ci.get("high")}

    return pd.DataFrame([{"rank": rank, "deployment": r.label, **bounds(r.quality, "rouge1"),
                          **bounds(r.versus_greedy, "delta_vs_greedy"),
                          "holm_p": (r.versus_greedy or {}).get("holm_p"),
                          **bounds(r.policy_accuracy, "policy_accuracy"),
                          "cost_vs_greedy": r.relative_cost, "seconds_per_output": r.seconds_per_output,
                          "pareto": r.pareto, "switched_off": r.switched_off}
                         for rank, r in enumerate(rows, 1)])


def open_run(path: str | Path) -> Run:
    """A finished run folder (what `persalign run -o` wrote), held by its absolute path: a notebook may change
    its working folder afterwards."""
    return Run(Path(path).resolve())


def run(config: str | Path | RunConfig | ResolvedRun, out_dir: str | Path | None = None, *, log=None, backend=None,
        **overrides) -> Run:
    """Every cell of `config` (a YAML path, a built-in name, a RunConfig or a run already resolved; `**overrides`
    as in the CLI, `__` for dots), resumable, into `out_dir` (default runs/NAME); progress lines go to `log`
    (default: none)."""
    from persalign.runner.resolve import ResolvedRun, resolve_run
    from persalign.runner.run import run as run_cells

    if not isinstance(config, ResolvedRun):  # a file or name passes load_config's value checks: not run twice
        config = resolve_run(resolve(config, overrides), values_checked=not isinstance(config, RunConfig))
    elif overrides:
        raise TypeError("overrides go with a config file or name, not with a resolved run")
    store = run_cells(config, out_dir or f"runs/{config.config.name}", log=log or (lambda *_: None), backend=backend)
    return Run(store.root)  # as given: the CLI's report lines name the folder as the user wrote it


def plan(config: str | Path | RunConfig, options=None, **overrides) -> str:
    """`persalign plan`'s text: cells, counted work, projected time and what the design can detect.
    `options`: a persalign.planner.plan.PlanOptions (--from-run, --budget-hours, GPU settings)."""
    from persalign.planner.plan import PlanOptions, check_from_run, plan_report
    from persalign.runner.plan import check_methods
    from persalign.runner.resolve import check_sizes

    resolved = resolve(config, overrides)
    options = options or PlanOptions()
    check_methods(resolved)
    check_sizes(resolved)
    check_from_run(options.from_run, resolved)
    return plan_report(resolved, options)
