"""`persalign plan`: what a study will cost and what it can detect, before any heavy work (issue #39).

The design (users, queries, cells) comes from the data and the split, as the
run would make them. The counted work of each stage comes from the cost model
every run counts with (persalign/cost.py) on the policy's shape (its config,
no weights) and the real prompt lengths, as an upper bound: every output is
taken to be max_new_tokens long and every ARGS cell to steer (λ > 0).
Training is projected only from a stored run (--from-run), which metered it.
Time on this machine is that work at the rates measured here
(persalign/machine_rates.py), times a stated slowdown (the full-size news study
ran at 1.35× its floor, docs/benchmarks.md); on a GPU it is the work at a stated
peak × utilisation, labelled a projection. What the design can detect comes
from planning_power.py.

    persalign plan demo
    persalign plan configs/study_news.yaml --from-run runs/study-study_news/study_news --budget-hours 2
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from persalign.cost import ModelShape, args_work, best_of_n_work, forward_flops, greedy_work
from persalign.runner.plan import cell_kind

NO_HEAD = ModelShape(0.0, 0.0, 0, 0)
TRAIN_SHARE = 0.5  # a proposal keeps at least this share of the users training the reward models (the paper: 80 %)


@dataclass
class Design:
    users: int
    train_users: int
    queries: dict[str, int]  # adaptation user -> query items
    eligible_queries: dict[str, int]  # any user -> query items it would give as an adaptation user, uncapped
    pairs: dict[str, int]  # train / heldout / support pair counts
    cells: Counter = field(default_factory=Counter)  # (deployment kind, shots) -> cells per policy (seeds included)
    seeds: int = 1
    trained: int = 0  # trained models (methods × seeds)
    prompt_tokens: float = 0.0  # mean zero-shot query prompt
    demo_tokens: float = 0.0  # mean tokens one demonstration adds
    response_tokens: float = 0.0  # mean chosen / rejected response
    distinct_prompts: int = 0  # among the train, held-out and support pairs (features are cached by text)
    distinct_responses: int = 0  # distinct (prompt, response) among them

    @property
    def query_items(self) -> int:
        return sum(self.queries.values())


def shape_from_config(config) -> ModelShape:
    """A decoder LM's counted shape from its config alone (Llama / Qwen / Mistral layout: GQA, gated MLP)."""
    width, layers = config.hidden_size, config.num_hidden_layers
    heads = config.num_attention_heads
    head_dim = getattr(config, "head_dim", None) or width // heads
    kv = getattr(config, "num_key_value_heads", None) or heads
    attention = 2 * width * heads * head_dim + 2 * width * kv * head_dim
    mlp = 3 * width * config.intermediate_size
    return ModelShape(float(layers * (attention + mlp)), float(config.vocab_size * width), layers, width)


kind_of = cell_kind  # one definition: runner/plan.py


def design_of(config) -> Design:
    """The run's data, split and cells, and the mean token lengths of its prompts (policies[0]'s tokenizer)."""
    from persalign.data.build import build_dataset
    from persalign.data.split import make_split
    from persalign.model_checks import policy_tokenizer
    from persalign.models.embedders import load_embedder
    from persalign.prompts import PromptFormatter
    from persalign.runner.plan import plan

    dataset = build_dataset(config.data, lambda: load_embedder(config.data.embedder, config.cache_dir), config.split)
    split = make_split(dataset, config.split)
    by_id = {c.id: c for c in dataset.comparisons}
    formatter = PromptFormatter(policy_tokenizer(config.policies[0], config.cache_dir), dataset.task,
                                config.generation.max_prompt_tokens)
    queries = [by_id[i] for i in split.query_ids()][:200]
    pairs = {name: sum(map(len, part.values())) for name, part in split.sets().items() if name != "query"}
    read = [by_id[i] for name in pairs for ids in split.sets()[name].values() for i in ids]
    per_user = dataset.comparisons_by_user()
    eligible = {u: len(per_user[u]) - len(split.support[u]) for u in split.adapt_users}  # before max_query_per_user
    share = 1 - config.split.support_fraction  # a train user who adapted instead: its query share of its pairs
    eligible.update({u: int(len(per_user[u]) * share) for u in split.train_users})
    design = Design(len(dataset.users()), len(split.train_users), {u: len(split.query[u]) for u in split.adapt_users},
                    eligible, pairs)
    design.prompt_tokens = float(np.mean([len(formatter.prompt_ids(c.prompt)) for c in queries]))
    design.response_tokens = float(np.mean([len(formatter.response_ids(c.chosen)) for c in queries]))
    design.demo_tokens = design.response_tokens + design.prompt_tokens * 0.8  # a demo: its input and output
    design.distinct_prompts = len({(c.prompt, c.history) for c in read})
    design.distinct_responses = len({(c.prompt, c.history, r) for c in read for r in (c.chosen, c.rejected)})
    cells = [p for p in plan(config) if p.cell.policy == config.policies[0]]
    design.cells = Counter((kind_of(p), p.decoder_config.shots if p.decoder_config else 0) for p in cells)
    design.trained = len({(p.method_label, p.cell.seed) for p in cells if p.method_label})
    design.seeds = len(config.seeds)
    return design


def rate_of(part: str) -> str:
    """Which measured rate a counted part runs at (persalign.machine_rates)."""
    return "decode" if "decode" in part else "candidates" if "candidates" in part else "prefill"


def generation_work(config, design: Design, shape: ModelShape) -> Counter:
    """Generation's counted FLOPs by the rate they run at (prefill, decode, candidates), for every cell."""
    new, items = config.generation.max_new_tokens, design.query_items
    prompt = round(design.prompt_tokens)
    shapes = {"policy": shape, "reward": None, "head": NO_HEAD}
    n_max = max(config.best_of_n.ns) if config.best_of_n.ns else 0
    parts: Counter = Counter()

    def add(work, times: float) -> None:
        for part, flops in work.parts.items():
            parts[rate_of(part)] += flops * times

    for (kind, shots), cells in design.cells.items():
        if kind == "best_of_n":  # reranks the shared samples (drawn below, once per seed): the RM reads each
            parts["prefill"] += cells * items * n_max * forward_flops(shape, prompt + new)
        elif kind == "args":
            add(args_work(shapes, prompt, new, new, config.args.top_k, False), cells * items)
        else:
            add(greedy_work(shape, round(prompt + shots * design.demo_tokens), new, new), cells * items)
    if n_max and any(kind == "best_of_n" for kind, _ in design.cells):
        add(greedy_work(shape, prompt, new, new), design.seeds * items * n_max)
    return parts


def stage_work(config, design: Design, shape: ModelShape) -> dict[str, float]:
    """Counted FLOPs of each stage for one policy (an upper bound: outputs of max_new_tokens, ARGS steering);
    generation by the rate its parts run at."""
    new, items = config.generation.max_new_tokens, design.query_items
    prompt, response = round(design.prompt_tokens), round(design.response_tokens)
    argsed = args_work({"policy": shape, "reward": None, "head": NO_HEAD}, prompt, new, new, config.args.top_k,
                       False).flops
    # a pair read once: its prompt, then the chosen and the rejected response on the prompt's cache
    pair = forward_flops(shape, prompt) + 2 * forward_flops(shape, response, prompt)
    argses = sum(n for (kind, _), n in design.cells.items() if kind == "args")
    # the query pairs are read once by the policy (memoised) and once by the frozen RM backbone (features
    # cached by text), whatever the number of ARGS cells
    scoring = 2 * items * pair if argses else 0.0
    for (kind, shots), cells in design.cells.items():
        # prompted deployments: the responses on the prompt's prefill, which generation already paid for;
        # ARGS: the RM reads its output and zero-shot's (the win rate)
        shown = round(prompt + shots * design.demo_tokens)
        scoring += cells * items * (2 * forward_flops(shape, prompt + new) if kind == "args"
                                    else 2 * forward_flops(shape, response, shown))
    nonzero = len([lam for lam in config.args.lambdas if lam != 0])
    validation = config.args.validation_size or design.pairs["heldout"]
    # ARGS on the validation items at every λ ≠ 0, per cell; the accuracy curve's pairs once (memoised)
    lam = argses * validation * nonzero * argsed + (design.pairs["heldout"] * pair if argses else 0.0)
    features = (design.distinct_prompts * forward_flops(shape, prompt)  # the frozen backbone reads each text once
                + design.distinct_responses * forward_flops(shape, response, prompt)) if argses else 0.0
    generation = {f"generation ({part})": flops for part, flops in generation_work(config, design, shape).items()}
    return {"features": features, "λ choice": lam, **generation, "scoring": scoring}


def projected_seconds(work: dict[str, float], rates: dict[str, float], slowdown: float) -> dict[str, float]:
    """Seconds per stage on this machine: work ÷ the measured rate of its kind, × `slowdown` (the λ choice is
    mostly ARGS decoding: candidates)."""
    kind = lambda stage: ("candidates" if stage == "λ choice" else rate_of(stage) if stage.startswith("generation")  # noqa: E731
                          else "prefill")
    return {stage: slowdown * flops / (rates[kind(stage)] * 1e9) for stage, flops in work.items()}


def per_query_item(work: dict[str, float], items: int) -> tuple[float, float]:
    """(work that grows with the query items, work that does not): generation and scoring vs the rest."""
    growing = sum(v for stage, v in work.items() if stage.startswith("generation")) + work["scoring"]
    return growing / max(1, items), sum(work.values()) - growing


# Dense bf16 peaks as their makers state them (TFLOP/s): what `--gpu NAME` projects with.
GPU_PEAKS = {"h100": 989.0, "h200": 989.0, "a100": 312.0, "l40s": 362.0, "l4": 121.0}


@dataclass
class PlanOptions:
    from_run: str | None = None
    budget_hours: float | None = None
    gpu_tflops: float = GPU_PEAKS["h100"]
    utilisation: float = 0.3  # of that peak; a projection until measured on the GPU
    slowdown: float = 1.35  # this machine's seconds ÷ its floor, measured on the full-size news study
    rate_reps: int = 2
    rates_model: str = "smollm2-135m-instruct"  # the model the machine's rates are measured on


def plan_report(config, options: PlanOptions) -> str:
    """The plan as text: design, counted work and projected time per stage, and what the design detects."""
    from persalign.machine_rates import measure_rates
    from persalign.model_checks import policy_config
    from persalign.planning_power import DEFAULT_BETWEEN, DEFAULT_WITHIN, Components, components_from_run, detectable

    design = design_of(config)
    shape = shape_from_config(policy_config(config.policies[0], config.cache_dir))
    work = stage_work(config, design, shape)
    rates = measure_rates(options.rate_reps, model=options.rates_model)["gflop_per_s"]
    here = projected_seconds(work, rates, options.slowdown)
    gpu = {stage: flops / (options.gpu_tflops * 1e12 * options.utilisation) for stage, flops in work.items()}
    components = components_from_run(options.from_run) if options.from_run else None
    components = components or Components(DEFAULT_BETWEEN, DEFAULT_WITHIN, "the demo's, stated defaults: no --from-run")
    queries = design.query_items / max(1, len(design.queries))
    lines = [f"plan: {config.name} ({len(config.policies)} policy model{'s' * (len(config.policies) > 1)}; "
             f"figures per policy, for {config.policies[0]})",
             f"users: {design.users} ({design.train_users} train, {len(design.queries)} adaptation); "
             f"{design.query_items} query items ({queries:.1f} per adaptation user); "
             f"pairs: {design.pairs['train']} train, {design.pairs['heldout']} held-out, {design.pairs['support']} support",
             f"cells: {sum(design.cells.values())} (" + ", ".join(
                 f"{n} {kind}{f' {shots}-shot' if shots else ''}" for (kind, shots), n in design.cells.items())
             + f"); trained models: {design.trained}", "",
             f"| stage | counted TFLOP | this machine (h) | GPU projection (min, {options.gpu_tflops:g} TFLOP/s × "
             f"{options.utilisation:g}) |", "|---|---|---|---|"]
    for stage in work:
        lines.append(f"| {stage} | {work[stage] / 1e12:.1f} | {here[stage] / 3600:.2f} | {gpu[stage] / 60:.3g} |")
    lines += [f"| total | {sum(work.values()) / 1e12:.1f} | {sum(here.values()) / 3600:.2f} | "
              f"{sum(gpu.values()) / 60:.3g} |", "",
              f"Upper bounds: every output max_new_tokens ({config.generation.max_new_tokens}) long, every ARGS cell "
              f"steering; training not projected (heads are cheap; P-DPO is not). This machine: work ÷ its measured "
              f"rates (decode {rates['decode']:.0f}, prefill {rates['prefill']:.0f} GFLOP/s) × {options.slowdown:g}. The GPU "
              f"column counts FLOPs only; decode steps there are bound by weight reads (docs/scale-out.md).", ""]
    lines += power_lines(design, components, here, options)
    return "\n".join(lines)


def power_lines(design: Design, components, seconds: dict, options: PlanOptions) -> list[str]:
    """What this design detects, and (with a budget) the users × queries that detect the least in it."""
    from persalign.planning_power import detectable, propose

    users, queries = len(design.queries), design.query_items / max(1, len(design.queries))
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
