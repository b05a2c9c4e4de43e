"""The `persalign` command.

    persalign run CONFIG [-o OUT] [key=value ...]   evaluate every cell, resumable
    persalign study CONFIG... [-o DIR] [--quick] [key=value ...]   the whole sweep + reports, resumable
    persalign report RUN_DIR [--format md|html]     tables (and figures) from stored results
    persalign data summary CONFIG [key=value ...]   users, pairs per user, examples
    persalign plan CONFIG [--budget-hours H]        cells, counted work, time, what the design can detect
    persalign list [--method pal]                   what is registered; one method's settings, documented
    persalign export runs/demo --format csv         one row per cell, for pandas
    persalign generate RUN_DIR --deployment NAME --user USER PROMPT   a deployment's output for one user
    persalign serve RUN_DIR --deployment NAME       the same as an OpenAI-compatible endpoint
"""

from __future__ import annotations

import contextlib
import io
import os
import signal
import sys
import threading
from pathlib import Path

from persalign.cli.parser import build_parser, split_overrides
from persalign.core.errors import PersalignError
from persalign.core.files import escape_controls
from persalign.models.numerics import pin_kernels


def _cmd_run(args) -> None:
    from persalign.api.runs import run
    from persalign.core.config import load_config
    from persalign.report.terminal import closing_summary
    from persalign.runner.resolve import resolve_run

    config = load_config(args.config, args.overrides)
    _check_wandb(args)
    finished = run(resolve_run(config, values_checked=True), args.output, log=_log(args), backend=_backend(args))
    say(closing_summary(finished.path))
    _log_to_wandb(args, [finished.path])


def say(*parts, file=None) -> None:
    """print, with control characters escaped: names and text from data reach the terminal as text only."""
    print(*(escape_controls(str(part)) for part in parts), file=file)


def _log(args):
    """Progress lines on standard output, or none with --quiet (errors still go to standard error)."""
    return (lambda *_: None) if args.quiet else say


def _log_to_wandb(args, run_dirs) -> None:
    if args.wandb_project is not None:
        from persalign.report.wandb_log import log_run

        for run_dir in run_dirs:
            folder = log_run(run_dir, args.wandb_project)
            print(f"wandb: logged {run_dir} to {folder}" if folder else "wandb: nothing logged (WANDB_MODE=disabled)")


def _check_wandb(args) -> None:
    if getattr(args, "wandb_project", None) is not None:
        from persalign.report.wandb_log import check_wandb

        check_wandb(args.wandb_project)


def _cmd_study(args) -> None:
    from persalign.cli.study import run_study
    from persalign.report.terminal import closing_summary

    _check_wandb(args)
    run_dirs = run_study(args.configs, args.overrides, args.output, args.quick, log=_log(args),
                         backend=_backend(args))
    for run_dir in run_dirs:
        say(closing_summary(run_dir, written=True))
    _log_to_wandb(args, run_dirs)


def _backend(args):
    """The local pool's options (--workers, else PERSALIGN_WORKERS, else one per core), else Ray's."""
    if args.backend == "local":
        from persalign.runner.pool_backend import PoolOptions, available_cores, default_workers
        return PoolOptions(default_workers() if args.workers is None else args.workers or available_cores(),
                           heavy_at_once=args.heavy_at_once)
    from persalign.runner.ray_backend import RayOptions
    return RayOptions(args.address, args.num_cpus, args.num_gpus, args.max_retries)


def _cmd_report(args) -> int:
    """Exit 1 (report still written) when planned cells are absent or damaged."""
    from persalign.api.runs import Run

    report = Run(args.run_dir).report(args.format)
    if args.format == "html":
        print(f"wrote {report}")
    else:
        say(report)
    return _warn_incomplete(args.run_dir)


def _warn_incomplete(run_dir) -> int:
    """Damaged and absent planned cells on standard error; 1 if there are any (the output is still written)."""
    from persalign.report.completeness import absent_cells
    from persalign.runner.store import RunStore

    store = RunStore(run_dir)
    finished = {(m["policy"], m["decoder"], m["seed"]) for m in store.all_metrics()}
    for problem in store.problems:
        say(f"persalign: damaged cell {problem}", file=sys.stderr)
    absent = absent_cells(store, finished)
    if absent:
        say(f"persalign: a partial run: {len(absent)} planned cells absent: {'; '.join(absent[:8])}"
            f"{' …' if len(absent) > 8 else ''}", file=sys.stderr)
    return 1 if store.problems or absent else 0


def _cmd_export(args) -> int:
    from persalign.api.runs import Run
    from persalign.core.files import write_atomic

    text = Run(args.run_dir).export(args.format, costs=args.costs)
    if args.output:
        write_atomic(Path(args.output), text)
        print(f"wrote {args.output}")
    else:
        sys.stdout.write(text)
    return _warn_incomplete(args.run_dir)


def _cmd_data_summary(args) -> None:
    from persalign.core.config import load_config
    from persalign.data.summary import summarize_data
    from persalign.runner.plan import check_methods
    from persalign.runner.resolve import check_sizes

    config = load_config(args.config, args.overrides)
    check_methods(config)  # a method or setting the run would refuse is said now, not after the data is read
    check_sizes(config)
    say(summarize_data(config))


def _cmd_plan(args) -> None:
    from persalign.api.runs import plan
    from persalign.core.config import load_config
    from persalign.planner.plan import GPU_PEAKS, PlanOptions, check_plan_options

    check_plan_options(args)  # before the config, the data and the minute of rate measurement
    config = load_config(args.config, args.overrides)
    say(plan(config, PlanOptions(args.from_run, args.budget_hours, args.gpu_tflops or GPU_PEAKS[args.gpu],
                                 args.utilisation, args.slowdown, gpu_rates=args.gpu_rates,
                                 choose_design=args.choose_design, workers=args.workers)))


def _cmd_list(args) -> None:
    from persalign.core.registry import METHODS, all_registries

    if args.method:
        from persalign.rewards.settings import settings_table

        print(settings_table(args.method, METHODS.get(args.method)))
        return
    for registry in all_registries():
        print(f"{registry.plural}:")
        for name, entry in registry.items():
            doc = getattr(entry, "description", None) or (entry.__doc__ or "").strip().splitlines()[0:1]
            doc = doc if isinstance(doc, str) else (doc[0] if doc else "")
            source = registry.plugin_source(name)
            print(f"  {name:<24} {doc}" + (f"  [plugin: {source}]" if source else ""))
        for name, reason in registry.broken.items():
            print(f"  {name:<24} BROKEN PLUGIN: {reason}")
        if not registry.names():
            print("  (none yet)")
    print(config_sections())


def config_sections() -> str:
    """The judge and the RL leg are run settings, not registered parts: their sections and defaults."""
    import dataclasses

    from persalign.core.config import JudgeConfig, RLConfig

    lines = []
    for key, cls, what in (("judge", JudgeConfig, "pairwise LLM judge of every generation (off until models is set)"),
                           ("rl", RLConfig, "RL leg: METHOD (RL) cells, GRPO through TRL with LoRA (rl.enabled)")):
        fields = ", ".join(f"{f.name}={getattr(cls(), f.name)!r}" for f in dataclasses.fields(cls))
        lines.append(f"  {key:<24} {what}; settings: {fields}")
    return "run settings (config sections):\n" + "\n".join(lines)


def out_of_memory(error: BaseException) -> str:
    return (f"out of memory ({type(error).__name__}: {str(error).splitlines()[0][:160] if str(error) else ''}); "
            "nothing already stored was lost; lower what sets the size (data.max_users, batch sizes, a method's "
            "settings) and re-run the same command to resume")


def os_problem(error: OSError) -> str:
    """'PATH: what the system said' and what that means for stored results (writes are atomic or per batch)."""
    where = error.filename or "a file"
    what = error.strerror or str(error)
    return (f"{where}: {what}; nothing already stored was lost (finished batches and cells are kept); "
            "fix that and re-run the same command to resume")


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


def _cmd_generate(args) -> None:
    from persalign.cli.deployed import generate

    generate(args, say)


def _cmd_serve(args) -> None:
    from persalign.cli.deployed import serve

    serve(args, say)


HANDLERS = {"run": _cmd_run, "study": _cmd_study, "report": _cmd_report, "export": _cmd_export,
            "summary": _cmd_data_summary, "plan": _cmd_plan, "list": _cmd_list, "generate": _cmd_generate,
            "serve": _cmd_serve}


def _quiet_stderr(args):
    """--quiet: progress bars and library chatter go to a sink while the command works (every bar is
    `disable=None`, so without a terminal there are none anyway: a log gets a plain line per cell). Errors
    are printed after the command has ended, to the real standard error."""
    return contextlib.redirect_stderr(io.StringIO()) if getattr(args, "quiet", False) else contextlib.nullcontext()


def _quiet_broken_pipe() -> int:
    """`persalign list | head -2`: the reader left; end quietly (no flush error at exit either)."""
    with contextlib.suppress(OSError, ValueError):
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    overrides, rest = split_overrides(argv)
    parser = build_parser(HANDLERS)
    if overrides and "generate" in rest[:1]:  # generate takes no overrides: `a=b` is a prompt
        rest = argv
    args, extra = parser.parse_known_args(rest)
    if extra and getattr(args, "prompts", None) is not None and not any(e.startswith("-") for e in extra):
        args.prompts += extra  # PROMPT after the options (argparse gives a trailing list only one place)
    elif extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    if not sys.stderr.isatty():  # the model hub's and transformers' own bars ("Loading weights") too;
        os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")  # read when they are first imported
    if hasattr(args, "overrides"):
        args.overrides = overrides + args.overrides
    try:
        with _terminate_like_interrupt(), _quiet_stderr(args):
            pin_kernels()  # before any torch operation (models/numerics.py)
            code = args.handler(args) or 0
    except BrokenPipeError:
        return _quiet_broken_pipe()
    except PersalignError as exc:
        say(f"persalign: error: {exc}", file=sys.stderr)  # errors quote records: escaped like any data
        return 2
    except MemoryError as exc:  # numpy's ArrayMemoryError too
        print(f"persalign: error: {out_of_memory(exc)}", file=sys.stderr)
        return 2
    except OSError as exc:  # read-only folder, disk full, a directory where a file belongs: one line, not a traceback
        say(f"persalign: error: {os_problem(exc)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as exc:
        what = "terminated (SIGTERM)" if isinstance(exc, Terminated) else "interrupted"
        print(f"persalign: {what}; completed batches are saved, re-run the same command to resume",
              file=sys.stderr)
        return 143 if isinstance(exc, Terminated) else 130
    return code


if __name__ == "__main__":
    sys.exit(main())
