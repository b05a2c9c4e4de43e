"""Optional Weights & Biases logging of a finished run, from its stored results (results.json).

One W&B run per persalign run: the resolved config and provenance as its config, one table with every
deployment's metrics (mean and 95 % CI), one with every cell, and each deployment's means in the
summary. Needs `pip install wandb`; `WANDB_MODE=offline` logs to RUN_DIR/wandb without a network.

    persalign run demo-baselines --wandb-project persalign-demo
"""

from __future__ import annotations

from pathlib import Path

from persalign.core.errors import ConfigError
from persalign.report.results import build_results


def deployment_rows(results: dict) -> tuple[list[str], list[list]]:
    """(columns, rows): policy, deployment, metric, mean, low, high, users, one row per metric."""
    columns = ["policy", "deployment", "metric", "mean", "low", "high", "users"]
    rows = [[d["policy"], d["deployment"], metric, v["mean"], v["low"], v["high"], v["users"]]
            for d in results["deployments"] for metric, v in d["metrics"].items()]
    return columns, rows


def cell_rows(results: dict) -> tuple[list[str], list[list]]:
    """(columns, rows): every cell's numbers (its nested settings and costs stay in results.json)."""
    cells = results["cells"]
    columns = list(dict.fromkeys(k for c in cells for k, v in c.items()
                                 if isinstance(v, (int, float, str)) or v is None))
    return columns, [[c.get(k) for k in columns] for c in cells]


MODES = ("online", "offline", "disabled", "dryrun", "run", "shared")


def check_wandb(project: str) -> None:
    """Before any work: an empty project, an unknown WANDB_MODE, or online logging without a login is one
    line (it ended in wandb's traceback after the run, or logged nothing and said nothing)."""
    import os

    if not project.strip():
        raise ConfigError("--wandb-project: empty; name a project, or leave the option out")
    mode = os.environ.get("WANDB_MODE", "online")
    if mode not in MODES:
        raise ConfigError(f"WANDB_MODE={mode!r} is not a W&B mode (online, offline, disabled)")
    if mode in ("online", "run") and not os.environ.get("WANDB_API_KEY") and \
            not (Path.home() / ".netrc").exists():
        raise ConfigError("--wandb-project: W&B has no login here (no WANDB_API_KEY, no ~/.netrc); run `wandb login`, "
                          "or set WANDB_MODE=offline to log into RUN_DIR/wandb")


def log_run(run_dir: str | Path, project: str) -> str | None:
    """Log `run_dir` to W&B `project`; returns the W&B run's local folder (None: WANDB_MODE=disabled)."""
    import os

    try:
        import wandb
    except ImportError:
        raise ConfigError("--wandb-project needs wandb: pip install wandb (the run itself is stored)") from None
    if os.environ.get("WANDB_MODE") == "disabled":
        return None
    results = build_results(run_dir)
    run = wandb.init(project=project, name=results["run"]["config"].get("name"), dir=str(run_dir),
                     config={"persalign": results["run"]["config"], "provenance": results["run"]["provenance"]})
    try:
        for name, (columns, rows) in (("deployments", deployment_rows(results)), ("cells", cell_rows(results))):
            run.log({name: wandb.Table(columns=columns, data=rows)})
        for d in results["deployments"]:
            for metric, value in d["metrics"].items():
                run.summary[f"{d['policy']}/{d['deployment']}/{metric}"] = value["mean"]
        return str(Path(run.dir).parent)
    finally:
        run.finish()

