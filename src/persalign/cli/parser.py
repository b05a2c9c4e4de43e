"""The `persalign` command line: its subcommands, their options and an example for each.

`key=value` overrides may stand anywhere on the line (also after `-o DIR`), which argparse
alone cannot parse, so `split_overrides` takes them out first.

    persalign --help
    persalign run --help
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from persalign import __version__

ABOUT = ("persalign: which personalized-alignment method writes most like each user when deployed? It trains "
         "personalized reward models on per-user preference pairs, deploys them (reward-guided ARGS decoding, "
         "Best-of-N) beside in-context learning, and scores the generations against what each user really wrote.")

GETTING_STARTED = """first steps:
  persalign run demo                                  built-in data and models, about 6 minutes on 2 cores
  persalign data summary configs/my_writing.yaml data.path=my.jsonl 'data.task={instruction: ...}'
  persalign plan configs/study_news.yaml              what a study costs and can detect, before running it
  persalign list --method pal                         one method's settings, each documented"""

EXAMPLES = {
    "run": """examples:
  persalign run demo
  persalign run configs/news_category.yaml -o runs/news seeds=[0,1,2]
  persalign run demo policies=[tiny-llama] data.embedder=hashing-bow split.max_query_per_user=1   # a smoke test
  persalign run demo --quiet            # only the closing table and the paths""",
    "study": """examples:
  persalign study demo -o runs/demo
  persalign study configs/study_news.yaml --quick""",
    "report": """examples:
  persalign report runs/demo/demo
  persalign report runs/demo/demo --format html""",
    "export": """examples:
  persalign export runs/demo/demo --format csv -o cells.csv
  python -c "import pandas as pd; print(pd.read_csv('cells.csv').head())"
  persalign export runs/demo/demo --format csv --costs   # also every counted-cost column
  persalign export runs/demo/demo --format rows -o rows.jsonl   # every generation (like --log_samples)""",
    "summary": """examples:
  persalign data summary demo
  persalign data summary configs/my_writing.yaml data.path=reviews.jsonl \\
      'data.task={instruction: Write a title for this product review., input_label: Review, output_label: Title}'""",
    "plan": """examples:
  persalign plan demo
  persalign plan configs/study_news.yaml --from-run runs/study/news --budget-hours 2 --gpu h100""",
    "generate": """examples:
  persalign generate runs/demo/demo --deployment "ICL-RAG (4-shot)" --user "Abe Local" "Storm closes the harbour"
  persalign generate runs/demo/demo --deployment LoRE --user "Abe Local" --file prompts.txt
  persalign generate runs/demo/demo --deployment LoRE --new-users me.jsonl --user Me "Storm closes the harbour\"""",
    "serve": """examples:
  persalign serve runs/demo/demo --deployment "ICL-RAG (4-shot)"      # http://127.0.0.1:8000/v1
  curl -s http://127.0.0.1:8000/v1/chat/completions -H 'Content-Type: application/json' -d '{"model": \\
      "ICL-RAG (4-shot)", "user": "Abe Local", "messages": [{"role": "user", "content": "Storm closes the harbour"}]}'
  (or the openai client: OpenAI(base_url="http://127.0.0.1:8000/v1", api_key="-").chat.completions.create(...))""",
    "list": """examples:
  persalign list
  persalign list --method pal""",
}

OVERRIDES_HELP = "config overrides such as seeds=[0,1] or generation.batch_size=8"
OPTIONS_WITH_A_VALUE = {"-o", "--output", "--address", "--num-cpus", "--num-gpus", "--max-retries", "--format",
                        "--from-run", "--budget-hours", "--gpu", "--gpu-tflops", "--utilisation", "--slowdown",
                        "--gpu-rates", "--deployment", "--user", "--file", "--seed", "--policy"}
OVERRIDE = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*=")


def _is_file(arg: str) -> bool:
    """Whether `arg` names an existing path; an override longer than a file name can be (255 bytes) is none
    (stat raised 'File name too long' before the config was read)."""
    try:
        return Path(arg).exists()
    except OSError:
        return False


def split_overrides(argv: list[str]) -> tuple[list[str], list[str]]:
    """(`key=value` overrides, the rest). An option's value (`-o runs/a=b`) or an existing file (`x=y.yaml`)
    is never an override."""
    overrides, rest = [], []
    for i, arg in enumerate(argv):
        is_value = i > 0 and argv[i - 1] in OPTIONS_WITH_A_VALUE
        if not is_value and OVERRIDE.match(arg) and not _is_file(arg):
            overrides.append(arg)
        else:
            rest.append(arg)
    return overrides, rest


def _command(commands, name: str, help_text: str, handler, example: str | None = None):
    command = commands.add_parser(name, help=help_text, description=help_text, epilog=EXAMPLES.get(example or name),
                                  formatter_class=argparse.RawDescriptionHelpFormatter)
    command.set_defaults(handler=handler)
    return command


def _add_run_arguments(command) -> None:
    command.add_argument("--quiet", action="store_true", help="no progress lines or bars: only the closing table, "
                         "the paths, and errors")
    group = command.add_argument_group("where the cells run")
    group.add_argument("--backend", choices=["local", "ray"], default="local",
                       help="local: this machine's cores, a pool of --workers single-threaded processes; ray: "
                            "every cell a Ray task (pip install 'persalign[ray]')")
    group.add_argument("--workers", type=int, default=None, metavar="N",
                       help="local backend: N single-threaded worker processes side by side (default: "
                            "$PERSALIGN_WORKERS, else one per core this process may use; 1: in this process). "
                            "The numbers are the same at any N")
    group.add_argument("--heavy-at-once", type=int, default=None, metavar="N",
                       help="local backend: memory-heavy tasks (GenARM and P-DPO fits, GenARM cells, ICL with "
                            ">= 128 demonstrations a batch, the λ choice's passes) side by side at most (default: "
                            "half the workers, at least 1; raise it where memory is plentiful)")
    group.add_argument("--address", help="Ray cluster to join (auto, or HOST:PORT); default: start one here")
    group.add_argument("--num-cpus", type=float, default=1.0, help="CPUs each Ray task asks for")
    group.add_argument("--num-gpus", type=float, default=0.0,
                       help="GPUs each Ray task asks for; a fraction (0.25) lets small-model cells share one")
    group.add_argument("--max-retries", type=int, default=2, help="retries of a Ray task whose worker died")
    command.add_argument("--wandb-project", metavar="PROJECT",
                         help="also log each finished run to Weights & Biases (pip install wandb; "
                              "WANDB_MODE=offline logs into RUN_DIR/wandb)")


def _add_plan_arguments(planning) -> None:
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
    planning.add_argument("--gpu-rates", metavar="FILE", help="a GPU's measured rates (benchmarks/gpu_rates.py; "
                          "one measured on an H200: benchmarks/measured/h200_rates.json): adds a column at them")
    planning.add_argument("--choose-design", action="store_true", help="with --from-run: search the data's item "
                          "thresholds, users, queries and seeds for the design that reads Findings 1-3 best (within "
                          "--budget-hours), and state the users each finding needs")
    planning.add_argument("--workers", type=int, help="the pool workers --choose-design's hours are for (default: "
                          "every core)")


def _add_export_arguments(export: argparse.ArgumentParser) -> None:
    export.add_argument("run_dir", help="a directory written by `persalign run`")
    export.add_argument("--format", choices=["csv", "json", "rows"], default="json",
                        help="csv: one tidy row per cell (pandas.read_csv); json: the versioned results.json; "
                             "rows: every generation with its prompt, one JSON line each "
                             "(pandas.read_json(lines=True))")
    export.add_argument("--costs", action="store_true", help="csv: also the counted-cost and timing columns")
    export.add_argument("-o", "--output", help="write to this file (default: standard output)")


def _add_deployment_arguments(command: argparse.ArgumentParser) -> None:
    """What names one deployment of a finished run (generate and serve)."""
    command.add_argument("run_dir", help="a directory written by `persalign run`")
    command.add_argument("--deployment", required=True, metavar="NAME", help="a deployment as the report names it")
    command.add_argument("--seed", type=int, help="the cell of this seed (default: the run's first)")
    command.add_argument("--policy", help="the cell of this policy model (default: the run's first)")
    command.add_argument("--new-users", metavar="FILE", help="people the run never saw, adapted first: JSON lines "
                         "{user, prompt, output} (a text they wrote) or {user, prompt, chosen, rejected}")


def _add_generate_arguments(generate: argparse.ArgumentParser) -> None:
    _add_deployment_arguments(generate)
    generate.add_argument("prompts", nargs="*", metavar="PROMPT", help="inputs of the run's task (e.g. an article "
                          "to write a headline for); one output each")
    generate.add_argument("--user", required=True, help="one of the run's adaptation users (or a --new-users one)")
    generate.add_argument("--file", help="prompts, one per line (beside or instead of PROMPT)")


def _add_serve_arguments(serve: argparse.ArgumentParser) -> None:
    _add_deployment_arguments(serve)
    serve.add_argument("--host", default="127.0.0.1", help="the address to listen on (default 127.0.0.1: this "
                       "machine only; 0.0.0.0 opens it to every network the machine is on)")
    serve.add_argument("--port", type=int, default=8000, help="the TCP port (default 8000)")


def build_parser(handlers: dict) -> argparse.ArgumentParser:
    """The whole command line; `handlers` maps each subcommand to the function that runs it."""
    parser = argparse.ArgumentParser(prog="persalign", description=ABOUT, epilog=GETTING_STARTED,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"persalign {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)

    run = _command(commands, "run", "evaluate a config (resumes an interrupted run)", handlers["run"])
    run.add_argument("config", help="a YAML config file, or a built-in config name (demo)")
    run.add_argument("-o", "--output", help="run directory (default runs/NAME)")
    run.add_argument("overrides", nargs="*", help=OVERRIDES_HELP)
    _add_run_arguments(run)

    study = _command(commands, "study", "sweep methods × policy models × seeds, then analyses and reports",
                     handlers["study"])
    study.add_argument("configs", nargs="+", help="one config per data set (YAML file or built-in name)")
    study.add_argument("-o", "--output", help="study directory (default runs/study-NAME)")
    study.add_argument("--quick", action="store_true", help="CI-sized variant: one seed, few items, capped training")
    _add_run_arguments(study)
    study.set_defaults(overrides=[])

    report = _command(commands, "report", "print and save the tables of a run directory", handlers["report"])
    report.add_argument("run_dir", help="a directory written by `persalign run`")
    report.add_argument("--format", choices=["md", "html"], default="md",
                        help="md: print the Markdown tables; html: one self-contained file with figures")

    _add_export_arguments(_command(commands, "export", "a run's results for other programs (docs/results-json.md)",
                                   handlers["export"]))

    _add_generate_arguments(_command(commands, "generate", "generate with a finished run's deployment for one of "
                                     "its users", handlers["generate"]))
    _add_serve_arguments(_command(commands, "serve", "serve a finished run's deployment as an OpenAI-compatible "
                                  "chat-completions endpoint (the request's user field names the person)",
                                  handlers["serve"]))

    data = commands.add_parser("data", help="inspect data sets")
    data_commands = data.add_subparsers(dest="data_command", required=True)
    summary = _command(data_commands, "summary", "users, pairs per user, the task and one rendered prompt, and "
                       "how many users each analysis needs", handlers["summary"])
    summary.add_argument("config", help="a YAML config file or built-in config name")
    summary.add_argument("overrides", nargs="*", help=OVERRIDES_HELP)

    planning = _command(commands, "plan", "a study's cells, counted work, projected time and detectable "
                        "difference, before any heavy work", handlers["plan"])
    _add_plan_arguments(planning)

    listing = _command(commands, "list", "registered data sets, methods, decoders, metrics, models", handlers["list"])
    listing.add_argument("--method", metavar="NAME", help="one method's settings: default, range, paper value, "
                         "meaning (a registered name or a plugin's module:Class)")
    return parser
