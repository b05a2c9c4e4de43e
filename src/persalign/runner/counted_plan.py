"""The counted work of a run's planned cells, stage by stage (the cost model `persalign plan` and a run's ETA
share; issue #39, #43).

The design (users, queries, cells) comes from the data and the split, as the run would make them; the
counted work of each stage from the cost model every run counts with (persalign/engine/cost.py) on the policy's
shape (its config, no weights) and the real prompt lengths, as an upper bound: every output is taken to be
max_new_tokens long and every ARGS cell to steer (λ > 0).

    persalign plan demo        # the design and counted work per stage, as a table
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from persalign.engine.cost import ModelShape, args_work, forward_flops, greedy_work
from persalign.runner.plan import cell_kind

NO_HEAD = ModelShape(0.0, 0.0, 0, 0)


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
    has_references: bool = True  # the users' own outputs exist: λ is chosen by decoding (the harmonic rule)

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
    from persalign.models.embedders import load_embedder

    dataset = build_dataset(config.data, lambda: load_embedder(config.data.embedder, config.cache_dir), config.split)
    return design_from(config, dataset, make_split(dataset, config.split), config.policies[0])


def design_from(config, dataset, split, policy: str, cells: list | None = None) -> Design:
    """`design_of` for data and a split already built (a run's own), with `policy`'s tokenizer and cells (the
    planned cells of that policy where the run has them, else planned here)."""
    from persalign.core.prompts import PromptFormatter
    from persalign.models.checks import policy_tokenizer
    from persalign.runner.plan import plan

    by_id = {c.id: c for c in dataset.comparisons}
    formatter = PromptFormatter(policy_tokenizer(policy, config.cache_dir), dataset.task,
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
    design.has_references = bool(dataset.completions)
    cells = cells if cells is not None else [p for p in plan(config) if p.cell.policy == policy]
    design.cells = Counter(cell_key(p) for p in cells)
    design.trained = len({(p.method_label, p.cell.seed) for p in cells if p.method_label})
    design.seeds = len(config.seeds)
    return design


def cell_key(planned) -> tuple[str, int]:
    """(kind of work, shots): what the cost model tells cells apart by."""
    return kind_of(planned), planned.decoder_config.shots if planned.decoder_config else 0


def rate_of(part: str) -> str:
    """Which measured rate a counted part runs at (persalign.planner.machine_rates)."""
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
    rule = config.args.selection
    decodes = rule == "harmonic" or (rule == "auto" and design.has_references)  # else: scored pairs only
    validation = (config.args.validation_size or design.pairs["heldout"]) if decodes else 0
    # ARGS on the validation items at every λ ≠ 0, per cell; the accuracy curve's pairs once (memoised)
    lam = argses * validation * nonzero * argsed + (design.pairs["heldout"] * pair if argses else 0.0)
    features = (design.distinct_prompts * forward_flops(shape, prompt)  # the frozen backbone reads each text once
                + design.distinct_responses * forward_flops(shape, response, prompt)) if argses else 0.0
    generation = {f"generation ({part})": flops for part, flops in generation_work(config, design, shape).items()}
    return {"features": features, "λ choice": lam, **generation, "scoring": scoring}
