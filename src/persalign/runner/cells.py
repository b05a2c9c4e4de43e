"""The per-cell work every backend shares: prepare the store, build the run and policy contexts,
provide a cell's trained component, run one cell. `runner/run.py` (local) and `runner/ray_backend.py`
(Ray tasks) both call these, so data flows one way: run → ray_backend → cells, run → cells.

    persalign run demo   # the local backend calls these one cell after another
"""

from __future__ import annotations

import json
from pathlib import Path

from persalign.core.config import RunConfig
from persalign.core.prompts import PromptFormatter, context_length, prompt_budget
from persalign.core.registry import DECODERS, METRICS
from persalign.core.typed_yaml import to_dict
from persalign.core.user_needs import shortfall_line
from persalign.data.build import build_dataset
from persalign.data.split import make_split
from persalign.decoders.base import EvalContext
from persalign.decoders.best_of_n_samples import SampleStore
from persalign.engine.batching import fixed_groups
from persalign.metrics.generation import RougeMetric
from persalign.models.device import resolve_device
from persalign.models.embedders import load_embedder
from persalign.models.loading import load_causal_lm
from persalign.models.numerics import differences, numerics
from persalign.runner import provenance
from persalign.runner.context import CellContext, PolicyContext, RunContext
from persalign.runner.evaluate import query_examples, run_cell
from persalign.runner.judging import load_judges
from persalign.runner.plan import PlannedCell
from persalign.runner.store import RunStore
from persalign.runner.trained import RewardBackbones, trained_policy_method, trained_reward


def open_store(resolved, out_dir: str | Path, log) -> tuple[RunStore, list[PlannedCell], list[PlannedCell]]:
    """The prepared run store of a resolved run (runner/resolve.py), every planned cell and those not yet
    complete."""
    config, cells = resolved.config, list(resolved.cells)
    store = RunStore(out_dir)
    inputs = provenance.input_fingerprints(config.data)
    store.prepare(to_dict(config), provenance.collect(str(resolve_device(config.device)), config.seeds, inputs))
    todo = [p for p in cells if not store.is_complete(p.cell)]
    log(f"run dir {store.root}: {len(cells)} cells, {len(cells) - len(todo)} already complete")
    say_other_machine(store, [p.cell for p in cells if p not in todo], log)
    return store, cells, todo


def say_other_machine(store: RunStore, done: list, log) -> None:
    """One line when stored cells were computed with another CPU, kernel set or thread count than this process."""
    now = numerics()
    for cell in done:
        before = json.loads((store.cell_dir(cell) / "metrics.json").read_text()).get("numerics")
        changed = differences(before, now) if before else ["not recorded (computed before issue #51)"]
        if changed:
            log(f"note: resuming on another machine or setting than the stored cells' ({'; '.join(changed)}); "
                "persalign's pinned kernels give the same numbers at any thread count, but CPUs of another vendor "
                "or instruction set can differ in the last digits of raw scores (docs/reliability.md, section "
                "'Same numbers on every machine')")
            return


def run_context(config: RunConfig, store: RunStore, log) -> RunContext:
    embedder = load_embedder(config.data.embedder, config.cache_dir)
    dataset = build_dataset(config.data, lambda: embedder, config.split)
    split = make_split(dataset, config.split)
    examples = query_examples(dataset, split)
    log(f"data {dataset.name}: {len(dataset.users())} users, {len(dataset.comparisons)} pairs; "
        f"{len(split.adapt_users)} adaptation users, {len(examples)} query examples")
    if split.query_seen_in_training:
        log(f"data: {split.query_seen_in_training} query pairs dropped: the same (prompt, chosen, rejected) is "
            "also a training, held-out or support pair (users holding the same pairs)")
    shortfall = shortfall_line(len(split.adapt_users))
    if shortfall:
        log(shortfall)
    metrics = [METRICS.get(name)(config.metrics, config.cache_dir) for name in config.metrics.names]
    rouge = next((m for m in metrics if isinstance(m, RougeMetric)), None) or RougeMetric(config.metrics)
    judges = load_judges(config, config.device, config.dtype, config.cache_dir)
    return RunContext(config, store, dataset, split, examples, EvalContext(dataset, split, embedder), metrics,
                      rouge, log, judges)


def load_policy(config: RunConfig, policy: str):
    return load_causal_lm(policy, config.device, config.dtype, config.cache_dir)


def policy_context(run_ctx: RunContext, lm) -> PolicyContext:
    config = run_ctx.config
    budget = prompt_budget(config.generation.max_prompt_tokens, config.generation.max_new_tokens,
                           context_length(lm.model.config))
    formatter = PromptFormatter(lm.tokenizer, run_ctx.dataset.task, budget)
    draws = fixed_groups(run_ctx.examples)  # neither the cells' batches nor the batch size
    samples = SampleStore(run_ctx.store.root, lm, formatter, run_ctx.metrics, config.best_of_n,
                          config.generation.max_new_tokens, draws)
    policy = PolicyContext(run_ctx, lm, formatter, samples)
    policy.meter.watch(lm.model)
    if config.generation.cuda_graph:  # every decode of this policy on its captured step (graphed_decode.py)
        from persalign.engine.graphed_decode import GraphedDecodes

        lm.graphs = GraphedDecodes(policy.meter)
    samples.meter = policy.meter
    return policy


def trained_providers(config: RunConfig, store: RunStore) -> dict:
    """What each kind of need is met by: a function of the cell context, cached per (method, seed)."""
    backbones = RewardBackbones(config, store)
    return {"reward_model": lambda ctx: trained_reward(ctx, backbones), "policy_method": trained_policy_method}


def need_key(planned: PlannedCell) -> tuple:
    """What a trained component is one per: a reward model per (method, seed), shared by the policies; a
    policy-side method per (method, seed, policy)."""
    policy = planned.cell.policy if planned.needs == "policy_method" else None
    return planned.needs, planned.method_label, planned.cell.seed, policy


def provide_trained(planned: PlannedCell, policy_ctx: PolicyContext, providers: dict):
    """The cell's trained component, trained (or loaded from the run dir) once per (method, seed)."""
    key = need_key(planned)
    if key not in policy_ctx.trained:
        policy_ctx.trained[key] = providers[planned.needs](CellContext(policy_ctx, planned))
    return policy_ctx.trained[key]


def is_pass_member(planned: PlannedCell, config: RunConfig) -> bool:
    """An ARGS cell of a reward model, decoded in its policy's shared pass where args.shared_pass is on (every
    backend that keeps the pass groups its cells by this)."""
    return config.args.shared_pass and planned.decoder == "args" and planned.needs == "reward_model"


def shared_args_pass(policy_ctx: PolicyContext, todo: list[PlannedCell], providers: dict):
    """The policy's shared ARGS pass over its ARGS cells still to run (args.shared_pass), or None. One cell
    alone is a pass too: a resumed run whose last member is left decodes as the interrupted one did."""
    cells = [p for p in todo if is_pass_member(p, policy_ctx.run.config)]
    if not cells:
        return None
    from persalign.runner.args_pass import ArgsPass

    return ArgsPass(policy_ctx, cells, lambda planned: provide_trained(planned, policy_ctx, providers))


def run_planned(planned: PlannedCell, policy_ctx: PolicyContext, providers: dict) -> dict:
    """One cell through the one evaluator; its metrics."""
    ctx = CellContext(policy_ctx, planned)
    if planned.needs:
        ctx.trained = provide_trained(planned, policy_ctx, providers)
    deployment = DECODERS.get(planned.decoder)(ctx)
    result = run_cell(deployment, ctx)
    cell = planned.cell
    policy_ctx.run.log(f"{cell.decoder} | {cell.policy} | seed {cell.seed}: {deployment.summary_line(result)}")
    return result
