"""The `persalign` command.

    persalign run CONFIG [-o OUT] [key=value ...]   evaluate every cell, resumable
    persalign study CONFIG... [-o DIR] [--quick] [key=value ...]   the whole sweep + reports, resumable
    persalign report RUN_DIR [--format md|html]     tables (and figures) from stored results
    persalign data summary CONFIG [key=value ...]   users, pairs per user, examples
    persalign plan CONFIG [--budget-hours H]        cells, counted work, time, what the design can detect
    persalign list                                  what is registered
    persalign list --method pal                     one method's settings, each documented
    persalign export runs/demo --format csv         one row per cell, for pandas
"""

from __future__ import annotations

import argparse
import contextlib
import re
import signal
import sys
import threading
from pathlib import Path

from persalign.errors import PersalignError

OVERRIDES_HELP = "config overrides such as seeds=[0,1] or generation.batch_size=8"


def _cmd_run(args) -> None:
    from persalign.config import load_config
    from persalign.report.markdown import build_report
    from persalign.runner.run import run

    config = load_config(args.config, args.overrides)
    store = run(config, args.output or f"runs/{config.name}", backend=_backend(args))
    print(build_report(store.root))
    _log_to_wandb(args, [store.root])


def _log_to_wandb(args, run_dirs) -> None:
    if args.wandb_project:
        from persalign.report.wandb_log import log_run

        for run_dir in run_dirs:
            print(f"wandb: logged {run_dir} to {log_run(run_dir, args.wandb_project)}")


def _cmd_study(args) -> None:
    from persalign.study import run_study

    run_dirs = run_study(args.configs, args.overrides, args.output, args.quick, backend=_backend(args))
    _log_to_wandb(args, run_dirs)


def _backend(args):
    """None for the local backend, else the Ray options of the command line."""
    if args.backend == "local":
        return None
    from persalign.runner.ray_backend import RayOptions

    return RayOptions(args.address, args.num_cpus, args.num_gpus, args.max_retries)


def _add_backend_arguments(command) -> None:
    group = command.add_argument_group("where the cells run")
    group.add_argument("--backend", choices=["local", "ray"], default="local",
                       help="local: one cell after another in this process; ray: every cell a Ray task "
                            "(pip install 'persalign[ray]')")
    group.add_argument("--address", help="Ray cluster to join (auto, or HOST:PORT); default: start one here")
    group.add_argument("--num-cpus", type=float, default=1.0, help="CPUs each Ray task asks for")
    group.add_argument("--num-gpus", type=float, default=0.0,
                       help="GPUs each Ray task asks for; a fraction (0.25) lets small-model cells share one")
    group.add_argument("--max-retries", type=int, default=2, help="retries of a Ray task whose worker died")
    command.add_argument("--wandb-project", metavar="PROJECT",
                         help="also log each finished run to Weights & Biases (pip install wandb; "
                              "WANDB_MODE=offline logs into RUN_DIR/wandb)")


def _cmd_report(args) -> int:
    """Exit 1 (report still written) when damaged cells had to be skipped."""
    from persalign.report.markdown import build_report
    from persalign.runner.store import RunStore

    if args.format == "html":
        from persalign.report.html import build_html_report

        print(f"wrote {build_html_report(args.run_dir)}")
    else:
        print(build_report(args.run_dir))
    store = RunStore(args.run_dir)
    store.all_metrics()
    for problem in store.problems:
        print(f"persalign: damaged cell {problem}", file=sys.stderr)
    return 1 if store.problems else 0


def _cmd_export(args) -> None:
    from persalign.files import write_atomic
    from persalign.report.results import export

    text = export(args.run_dir, args.format)
    if args.output:
        write_atomic(Path(args.output), text)
        print(f"wrote {args.output}")
    else:
        sys.stdout.write(text)


def _cmd_data_summary(args) -> None:
    from persalign.config import load_config
    from persalign.data.summary import summarize_data

    from persalign.runner.plan import check_methods

    config = load_config(args.config, args.overrides)
    check_methods(config)  # a method or setting the run would refuse is said now, not after the data is read
    print(summarize_data(config))


def _cmd_plan(args) -> None:
    from persalign.config import load_config
    from persalign.planning import GPU_PEAKS, PlanOptions, plan_report
    from persalign.runner.plan import check_methods

    config = load_config(args.config, args.overrides)
    check_methods(config)
    peak = args.gpu_tflops or GPU_PEAKS[args.gpu]
    print(plan_report(config, PlanOptions(args.from_run, args.budget_hours, peak, args.utilisation, args.slowdown)))


def _cmd_list(args) -> None:
    from persalign.registry import METHODS, all_registries

    if args.method:
        from persalign.rewards.settings import settings_table

        print(settings_table(args.method, METHODS.get(args.method)))
        return
    for registry in all_registries():
        print(f"{registry.plural}:")
        for name, entry in registry.items():
            doc = getattr(entry, "description", None) or (entry.__doc__ or "").strip().splitlines()[0:1]
            doc = doc if isinstance(doc, str) else (doc[0] if doc else "")
            print(f"  {name:<24} {doc}")
        if not registry.names():
            print("  (none yet)")


def os_problem(error: OSError) -> str:
    """'PATH: what the system said' and what that means for stored results (writes are atomic or per batch)."""
    where = error.filename or "a file"
    what = error.strerror or str(error)
    return (f"{where}: {what}; nothing already stored was lost (finished batches and cells are kept); "
            "fix that and re-run the same command to resume")


OPTIONS_WITH_A_VALUE = {"-o", "--output", "--address", "--num-cpus", "--num-gpus", "--max-retries", "--format",
                       "--from-run", "--budget-hours", "--gpu", "--gpu-tflops", "--utilisation", "--slowdown"}
OVERRIDE = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*=")


def split_overrides(argv: list[str]) -> tuple[list[str], list[str]]:
    """(`key=value` overrides, the rest). Overrides may stand anywhere (also after -o DIR), which argparse
    alone cannot parse; an option's value (`-o runs/a=b`) or an existing file (`x=y.yaml`) is never one."""
    overrides, rest = [], []
    for i, arg in enumerate(argv):
        is_value = i > 0 and argv[i - 1] in OPTIONS_WITH_A_VALUE
        if not is_value and OVERRIDE.match(arg) and not Path(arg).exists():
            overrides.append(arg)
        else:
            rest.append(arg)
    return overrides, rest


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="persalign", description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)

    run = commands.add_parser("run", help="evaluate a config (resumes an interrupted run)")
    run.add_argument("config", help="a YAML config file, or a built-in config name (demo)")
    run.add_argument("-o", "--output", help="run directory (default runs/NAME)")
    run.add_argument("overrides", nargs="*", help=OVERRIDES_HELP)
    _add_backend_arguments(run)
    run.set_defaults(handler=_cmd_run)

    study = commands.add_parser("study", help="sweep methods x policy models x seeds, then analyses and reports")
    study.add_argument("configs", nargs="+", help="one config per data set (YAML file or built-in name)")
    study.add_argument("-o", "--output", help="study directory (default runs/study-NAME)")
    study.add_argument("--quick", action="store_true", help="CI-sized variant: one seed, few items, capped training")
    _add_backend_arguments(study)
    study.set_defaults(handler=_cmd_study, overrides=[])

    report = commands.add_parser("report", help="print and save the tables of a run directory")
    report.add_argument("run_dir", help="a directory written by `persalign run`")
    report.add_argument("--format", choices=["md", "html"], default="md",
                        help="md: print the Markdown tables; html: one self-contained file with figures")
    report.set_defaults(handler=_cmd_report)

    export = commands.add_parser("export", help="a run's results for other programs (docs/results-json.md)")
    export.add_argument("run_dir", help="a directory written by `persalign run`")
    export.add_argument("--format", choices=["csv", "json"], default="json",
                        help="csv: one row per cell (pandas.read_csv); json: the versioned results.json document")
    export.add_argument("-o", "--output", help="write to this file (default: standard output)")
    export.set_defaults(handler=_cmd_export)

    data = commands.add_parser("data", help="inspect data sets")
    data_commands = data.add_subparsers(dest="data_command", required=True)
    summary = data_commands.add_parser("summary", help="users, pairs per user and a few examples")
    summary.add_argument("config", help="a YAML config file or built-in config name")
    summary.add_argument("overrides", nargs="*", help=OVERRIDES_HELP)
    summary.set_defaults(handler=_cmd_data_summary)

    planning = commands.add_parser("plan", help="a study's cells, counted work, projected time and detectable "
                                   "difference, before any heavy work")
    planning.add_argument("config", help="a YAML config file or built-in config name")
    planning.add_argument("overrides", nargs="*", help=OVERRIDES_HELP)
    planning.add_argument("--from-run", metavar="RUN_DIR", help="a finished run of the same data: its users' "
                          "variance components replace the stated defaults")
    planning.add_argument("--budget-hours", type=float, help="propose the users × queries split that detects the "
                          "smallest difference within this many hours on this machine")
    planning.add_argument("--gpu", choices=["h100", "h200", "a100", "l40s", "l4"], default="h100",
                          help="the GPU to project on, at its maker's dense bf16 peak")
    planning.add_argument("--gpu-tflops", type=float, help="another GPU's peak (TFLOP/s) instead of --gpu's")
    planning.add_argument("--utilisation", type=float, default=0.3, help="share of that peak assumed reached")
    planning.add_argument("--slowdown", type=float, default=1.35,
                          help="this machine's seconds ÷ its floor (1.35: measured on the full-size news study)")
    planning.set_defaults(handler=_cmd_plan)

    listing = commands.add_parser("list", help="registered data sets, methods, decoders, metrics, models")
    listing.add_argument("--method", metavar="NAME", help="one method's settings: default, range, paper value, "
                         "meaning (a registered name or a plugin's module:Class)")
    listing.set_defaults(handler=_cmd_list)
    return parser


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where the program is, so it unwinds like Ctrl-C: a batch is either stored or redone."""


@contextlib.contextmanager
def _terminate_like_interrupt():
    """Schedulers, `kill` and `timeout` send SIGTERM; Python's default for it ends the process on the spot.

    Only the main thread may set a handler; the previous one comes back when the command ends, so
    calling main() in a test or a notebook leaves the process as it was."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def raise_terminated(signum, frame):
        raise Terminated

    previous = signal.signal(signal.SIGTERM, raise_terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    overrides, rest = split_overrides(argv)
    args = build_parser().parse_args(rest)
    if hasattr(args, "overrides"):
        args.overrides = overrides + args.overrides
    try:
        with _terminate_like_interrupt():
            code = args.handler(args) or 0
    except PersalignError as exc:
        print(f"persalign: error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:  # read-only folder, disk full, a directory where a file belongs: one line, not a traceback
        print(f"persalign: error: {os_problem(exc)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as exc:
        what = "terminated (SIGTERM)" if isinstance(exc, Terminated) else "interrupted"
        print(f"persalign: {what}; completed batches are saved, re-run the same command to resume",
              file=sys.stderr)
        return 143 if isinstance(exc, Terminated) else 130
    return code


if __name__ == "__main__":
    sys.exit(main())
