"""`persalign plan`: what a study will cost and what it can detect, before any heavy work (issue #39).

The design and the counted work of each stage come from persalign/runner/counted_plan.py
(the cost model every run counts with, on the policy's config and the real prompt
lengths; an upper bound: outputs of max_new_tokens, every ARGS cell steering).
Training is projected only from a stored run (--from-run), which metered it.
Time on this machine is that work at the rates measured here
(persalign/planner/machine_rates.py), times a stated slowdown (the full-size news study
ran at 1.35× its floor, docs/benchmarks.md); on a GPU it is the work at a stated
peak × utilisation, labelled a projection. What the design can detect comes
from planner/power.py. Its options are checked before any work, a --from-run must be a finished run of
the same data, and this machine's measured rates are kept between plans (issue #56).

    persalign plan demo
    persalign plan configs/study_news.yaml --from-run runs/study-study_news/study_news --budget-hours 2
"""

from __future__ import annotations

import json
import math
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from persalign.core.errors import ConfigError
from persalign.runner.counted_plan import Design, design_of, rate_of, shape_from_config, stage_work  # noqa: F401  (re-exported)

TRAIN_SHARE = 0.5  # a proposal keeps at least this share of the users training the reward models (the paper: 80 %)


def projected_seconds(work: dict[str, float], rates: dict[str, float], slowdown: float) -> dict[str, float]:
    """Seconds per stage on this machine: work ÷ the measured rate of its kind, × `slowdown`. The λ choice is
    mostly ARGS decoding (candidates); ARGS's candidates run at the graphed step's rate where `rates` has one
    (`gpu_rates_for(..., graphed=True)`: the λ grid and the query batches both take the graph)."""
    def kind(stage: str) -> str:
        measured = "candidates" if stage == "λ choice" else rate_of(stage) if stage.startswith("generation") \
            else "prefill"
        return GRAPHED_KIND if measured == "candidates" and GRAPHED_KIND in rates else measured

    return {stage: slowdown * flops / (rates[kind(stage)] * 1e9) for stage, flops in work.items()}


def per_query_item(work: dict[str, float], items: int) -> tuple[float, float]:
    """(work that grows with the query items, work that does not): generation and scoring vs the rest."""
    growing = sum(v for stage, v in work.items() if stage.startswith("generation")) + work["scoring"]
    return growing / max(1, items), sum(work.values()) - growing


# Dense bf16 peaks as their makers state them (TFLOP/s): what `--gpu NAME` projects with.
GPU_PEAKS = {"h100": 989.0, "h200": 989.0, "a100": 312.0, "l40s": 362.0, "l4": 121.0}
KIND_NAMES = ("decode", "candidates", "prefill")  # the kinds of work a rate is measured for (machine_rates.py)
GRAPHED_KIND = "candidates_graphed"  # ARGS with its step captured as a CUDA graph (a GPU's rates file may have it)


@dataclass
class PlanOptions:
    from_run: str | None = None
    budget_hours: float | None = None
    gpu_tflops: float = GPU_PEAKS["h100"]
    utilisation: float = 0.3  # of that peak; a projection until measured on the GPU
    slowdown: float = 1.35  # this machine's seconds ÷ its floor, measured on the full-size news study
    rate_reps: int = 2
    rates_model: str = "smollm2-135m-instruct"  # the model the machine's rates are measured on
    gpu_rates: str | None = None  # a GPU's measured rates (benchmarks/gpu_rates.py): the plan's last column
    choose_design: bool = False  # search the data's designs for the findings (planner/design_choice.py)
    workers: int | None = None  # the pool's workers the hours are for (None: every core, as a run)


def plan_report(config, options: PlanOptions) -> str:
    """The plan as text: design, counted work and projected time per stage, and what the design detects."""
    from persalign.models.checks import policy_config
    from persalign.models.numerics import kernel_tag
    from persalign.planner.machine_rates import measure_rates
    from persalign.planner.power import DEFAULT_BETWEEN, DEFAULT_WITHIN, Components, components_from_run

    design = design_of(config)
    shape = shape_from_config(policy_config(config.policies[0], config.cache_dir))
    work = stage_work(config, design, shape)
    key = f"{options.rates_model}-{kernel_tag('cpu')}-reps{options.rate_reps}"
    rates = cached_rates(lambda: measure_rates(options.rate_reps, model=options.rates_model), config.cache_dir,
                         key)["gflop_per_s"]
    here = projected_seconds(work, rates, options.slowdown)
    components = components_from_run(options.from_run) if options.from_run else None
    components = components or Components(DEFAULT_BETWEEN, DEFAULT_WITHIN, "the demo's, stated defaults: no --from-run")
    queries = design.query_items / max(1, len(design.queries))
    lines = [f"plan: {config.name} ({len(config.policies)} policy model{'s' * (len(config.policies) > 1)}; "
             f"figures per policy, for {config.policies[0]})",
             f"users: {design.users} ({design.train_users} train, {len(design.queries)} adaptation); "
             f"{design.query_items} query items ({queries:.1f} per adaptation user); "
             f"pairs: {design.pairs['train']} train, {design.pairs['heldout']} held-out, "
             f"{design.pairs['support']} support",
             f"cells: {sum(design.cells.values())} (" + ", ".join(
                 f"{n} {kind}{f' {shots}-shot' if shots else ''}" for (kind, shots), n in design.cells.items())
             + f"); trained models: {design.trained}", ""]
    lines += stage_table(work, here, options, (shape.body_params, generation_rows(config, design), takes_graph(config)))
    lines += [f"Upper bounds: every output max_new_tokens ({config.generation.max_new_tokens}) long, every ARGS cell "
              f"steering; training not projected (heads are cheap; P-DPO is not). This machine: work ÷ its measured "
              f"rates (decode {rates['decode']:.0f}, prefill {rates['prefill']:.0f} GFLOP/s) × {options.slowdown:g}. "
              "The GPU column counts FLOPs only: on an H200 decoding ran 70–290× slower than it (per-step overheads, "
              "docs/scale-out.md); --gpu-rates FILE adds a column at a GPU's measured rates.", ""]
    lines += power_lines(design, components, here, options)
    if options.choose_design and options.from_run:
        from persalign.planner.design_choice import choice_report
        from persalign.runner.pool_backend import default_workers

        workers = options.workers or default_workers()
        lines += ["", choice_report(config, options.from_run, options.budget_hours, workers)]
    return "\n".join(lines)


def takes_graph(config) -> bool:
    """Whether the run's ARGS cells decode with the captured step (`args.cuda_graph` and an RM on its own
    backbone: LoRA, or a reward backbone other than the policy); frozen heads on the policy decode eagerly."""
    backbone = config.reward.backbone or config.policies[0]
    return config.args.cuda_graph and (config.reward.mode == "lora" or backbone != config.policies[0])


def generation_rows(config, design: Design) -> int:
    """The rows a generation batch really holds: the batch size, or fewer where the run has fewer query items
    (the batch a GPU's measured rates are read at)."""
    return max(1, min(config.generation.batch_size, design.query_items))


def stage_table(work: dict, here: dict, options: PlanOptions, policy: tuple[float, int, bool]) -> list[str]:
    """Per stage: counted work, hours here, the FLOP-peak GPU projection and (with --gpu-rates) the GPU at its
    measured rates for `policy` = (body parameters, generation batch size, ARGS graphed)."""
    gpu = {stage: flops / (options.gpu_tflops * 1e12 * options.utilisation) for stage, flops in work.items()}
    measured, label = ({}, "")
    if options.gpu_rates:
        gpu_rates, label = gpu_rates_for(options.gpu_rates, *policy)
        measured = projected_seconds(work, gpu_rates, 1.0)
    extra = (" | " + f"GPU at measured rates (min, {label})", "---|") if measured else ("", "")
    lines = [f"| stage | counted TFLOP | this machine (h) | GPU projection (min, {options.gpu_tflops:g} TFLOP/s × "
             f"{options.utilisation:g}){extra[0]} |", "|---|---|---|---|" + extra[1]]

    def pick(seconds: dict, stage: str) -> float:
        return sum(seconds.values()) if stage == "total" else seconds[stage]

    for stage in [*work, "total"]:
        cells = [f"{pick(work, stage) / 1e12:.1f}", f"{pick(here, stage) / 3600:.2f}", f"{pick(gpu, stage) / 60:.3g}"]
        cells += [f"{pick(measured, stage) / 60:.3g}"] if measured else []
        lines.append(f"| {stage} | " + " | ".join(cells) + " |")
    return lines + [""]


def gpu_rates_for(path: str, body_params: float, batch: int, graphed: bool = False) -> tuple[dict[str, float], str]:
    """GFLOP/s of each kind of work (benchmarks/gpu_rates.py's file) at the measured architecture nearest the
    policy in body parameters and at `batch`, log-interpolated between measured batch sizes (the nearest one's
    outside them: no extrapolation); and a label naming the device and architecture. `graphed`: ARGS's
    generation at the graphed step's rate (GRAPHED_KIND) where the file measured it (the label says which)."""
    record = json.loads(Path(path).read_text())
    arch, entry = min(record["architectures"].items(),
                      key=lambda item: abs(math.log(item[1]["body_params"] / body_params)))
    measured = sorted((int(b), kinds) for b, kinds in entry["batches"].items())
    sizes = [b for b, _ in measured]
    where = min(max(batch, sizes[0]), sizes[-1])
    upper = next(i for i, b in enumerate(sizes) if b >= where)
    lower = max(0, upper - 1)
    (b0, r0), (b1, r1) = measured[lower], measured[upper]
    share = 0.0 if b1 == b0 else (math.log(where) - math.log(b0)) / (math.log(b1) - math.log(b0))
    kinds = KIND_NAMES + ((GRAPHED_KIND,) if graphed and all(GRAPHED_KIND in r for _, r in measured) else ())
    rates = {kind: math.exp((1 - share) * math.log(r0[kind]) + share * math.log(r1[kind])) for kind in kinds}
    note = {(False, False): "", (True, True): ", graphed ARGS",
            (True, False): ", eager ARGS: the file has no graphed rates"}[(graphed, GRAPHED_KIND in rates)]
    return rates, f"{record['device']}, {arch} at batch {batch}{note}"


def power_lines(design: Design, components, seconds: dict, options: PlanOptions) -> list[str]:
    """What this design detects, and (with a budget) the users × queries that detect the least in it."""
    from persalign.planner.power import detectable, harmonic_queries, propose

    users, queries = len(design.queries), harmonic_queries(design.queries.values())  # unequal counts: harmonic
    now = detectable(users, queries, components.between, components.within)
    lines = [f"Finding 3 (best ICL − best reward method, ROUGE-1): between-user sd {components.between:.1f}, "
             f"within-user sd {components.within:.1f} (from {components.source}); this design detects "
             + (f"{now:.1f} points with 80% power" if np.isfinite(now) else f"nothing: {users} users, 6 needed")]
    if options.budget_hours:
        growing, fixed = per_query_item(seconds, design.query_items)
        eligible = sorted(design.eligible_queries.values(), reverse=True)[: int(design.users * (1 - TRAIN_SHARE))]
        best = propose(components, eligible, lambda u, items: (fixed + growing * items) / 3600, options.budget_hours)
        if best:
            top = best[0]
            lines.append(f"within {options.budget_hours:g} h here: {top['users']} adaptation users × {top['queries']} "
                         f"queries ({top['hours']:.2f} h) detect {top['detectable']:.1f} points; set "
                         f"split.adapt_fraction={top['users'] / design.users:.3f} and "
                         f"split.max_query_per_user={top['queries']} (the rest of the users train the reward models)")
        else:
            lines.append(f"no design with 6+ adaptation users (and half of the users training) fits "
                         f"{options.budget_hours:g} h on this machine")
    return lines


# --- the options of `persalign plan`, checked before any work, and the measured rates kept (issue #56) ---
# option -> (rule, what it must be); None always passes (the option is unset)
PLAN_OPTION_RULES = {
    "budget_hours": (lambda v: 0 < v <= 100_000, "a number of hours > 0 and at most 100000"),
    "gpu_tflops": (lambda v: 0 < v < math.inf, "a finite peak > 0 (TFLOP/s)"),
    "utilisation": (lambda v: 0 < v <= 1, "a share of the peak in (0, 1]"),
    "slowdown": (lambda v: 1 <= v < math.inf, "a finite factor >= 1 (this machine's seconds ÷ its floor)"),
    "workers": (lambda v: 1 <= v <= 4096, "a number of pool workers from 1 to 4096"),
}


def check_plan_options(args) -> None:
    for name, (ok, rule) in PLAN_OPTION_RULES.items():
        value = getattr(args, name, None)
        if value is not None and not (math.isfinite(value) and ok(value)):
            raise ConfigError(f"--{name.replace('_', '-')}: {value!r} is not allowed (must be {rule})")
    if getattr(args, "gpu_rates", None) is not None:
        check_gpu_rates(args.gpu_rates)
    if getattr(args, "choose_design", False) and not args.from_run:
        raise ConfigError("--choose-design needs --from-run RUN_DIR: a finished run of the same data, whose noise "
                          "and seconds the search scales")


def check_gpu_rates(path: str) -> None:
    """A --gpu-rates file must be benchmarks/gpu_rates.py's: every architecture with its body parameters and,
    per batch size, a finite rate > 0 of each kind."""
    problem = None
    try:
        record = json.loads(Path(path).read_text())
        entries = record["architectures"]
        rates = [kinds[k] for e in entries.values() for kinds in e["batches"].values()
                 for k in KIND_NAMES + tuple(k for k in (GRAPHED_KIND,) if k in kinds)]
        sizes = [int(b) for e in entries.values() for b in e["batches"]] + [e["body_params"] for e in entries.values()]
        if not entries or not rates or not all(isinstance(v, (int, float)) and math.isfinite(v) and v > 0
                                                for v in rates + sizes):
            problem = "no architecture with finite rates > 0"
        str(record["device"])
    except OSError as error:
        problem = f"cannot be read ({error.strerror or error})"
    except (ValueError, KeyError, TypeError, AttributeError) as error:
        problem = f"not a rates file of benchmarks/gpu_rates.py ({type(error).__name__}: {error})"
    if problem:
        raise ConfigError(f"--gpu-rates {path}: {problem}")


def check_from_run(run_dir: str | None, config) -> None:
    """A `--from-run` must be a finished run of the same data: its variance components are the plan's."""
    if run_dir is None:
        return
    folder = Path(run_dir)
    if not (folder / "config.yaml").is_file():
        raise ConfigError(f"--from-run {run_dir}: not a run folder (no config.yaml)")
    from persalign.core.config import load_config

    stored = load_config(str(folder / "config.yaml"))
    mine, theirs = ((c.data.dataset, str(c.data.path or "")) for c in (config, stored))
    if Path(mine[1]).name != Path(theirs[1]).name or mine[0] != theirs[0]:
        raise ConfigError(f"--from-run {run_dir}: a run of other data ({theirs[0]} {theirs[1] or '(built in)'}; this "
                          f"plan: {mine[0]} {mine[1] or '(built in)'}): its users' spread is not this data's")
    from persalign.planner.power import components_from_run

    if components_from_run(run_dir) is None:
        raise ConfigError(f"--from-run {run_dir}: no finished ICL cell beside a reward method or zero-shot to take "
                          "the users' spread from (empty or partial run)")


def cached_rates(measure, cache_dir: str | None, key: str) -> dict:
    """`measure()` once per machine, model, kernel set and thread count, then read back (the rates do not change
    between plans); says what it is doing while it measures (about a minute)."""
    from persalign.core.files import write_atomic
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
    write_atomic(path, json.dumps(rates))  # a kill while writing leaves no half record
    return rates
