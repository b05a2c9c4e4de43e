"""The one evaluator: any deployment, any cell, batch by batch through the run store.

The query examples are batched by length within a token budget (shortest
prompts first, persalign.engine.batching), so a batch pads only to its own longest
prompt. For each batch not yet on disk: the deployment builds the prompts,
generates (where the data has the users' own outputs to compare with), ranks
each (chosen, rejected) pair with its own scoring function; one row per example
is appended to the cell's rows.jsonl with the batch's stage timings. When every
batch is stored the rows are put back in the examples' order, the generations
are scored against the users' own texts, and the cell's metrics.json is written
from them.

    persalign run demo -o runs/demo
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
from tqdm.auto import tqdm

from persalign.core.errors import NonFiniteScores
from persalign.core.records import Comparison, Completion
from persalign.decoders.base import Generated, PairScores
from persalign.engine.batching import fixed_groups, plan_generation
from persalign.engine.cost import cell_work, reward_shapes
from persalign.metrics.generation import score_generations
from persalign.metrics.ranking import pair_outcome, ranking_accuracy, user_macro_mean
from persalign.models.numerics import numerics
from persalign.runner.provenance import peak_gpu_memory_mib, peak_memory_mib


@dataclass(frozen=True)
class Example:
    comparison: Comparison
    completion: Completion | None  # None for pair-only data (TL;DR, PRISM, RewardBench): nothing to generate for

    @property
    def id(self) -> str:
        return self.comparison.id

    @property
    def reference(self) -> str | None:
        return self.completion.reference if self.completion else None


def query_examples(dataset, split) -> list[Example]:
    """Query pairs of the adaptation users; with user completions, only those that have one."""
    comparisons = {c.id: c for c in dataset.comparisons}
    completions = dataset.completion_by_id()
    if not completions:
        return [Example(comparisons[i], None) for i in split.query_ids()]
    return [Example(comparisons[i], completions[i]) for i in split.query_ids() if i in completions]


@contextmanager
def timed(timings: dict, key: str, meter=None):
    """Seconds of the block in timings[key]; with a WorkMeter, its own metered FLOPs in timings[STAGE_flops] and
    the shared work it did (memos, caches: persalign.engine.work_meter) in timings[STAGE_shared_flops]."""
    start = time.perf_counter()
    before, shared = (meter.flops, meter.shared_flops) if meter is not None else (0.0, 0.0)
    yield
    timings[key] = time.perf_counter() - start
    if meter is not None:
        stage = key.removesuffix("_s")
        timings[stage + "_flops"] = meter.flops - before
        if meter.shared_flops > shared:
            timings[stage + "_shared_flops"] = meter.shared_flops - shared


def evaluate_batch(deployment, generate: bool, batch: list[Example], index: int, meter=None):
    """One batch of any deployment: (rows, stage seconds and metered FLOPs). Generations are scored when the
    cell ends."""
    timings = {"batch": index}
    with timed(timings, "prompts_s"):
        prepared = deployment.prepare(batch)
    generated = None
    with timed(timings, "generation_s", meter):
        if generate or deployment.always_generates:
            generated = deployment.generate(prepared)
    if generated is not None:  # a shared pass is charged to its cells by share (decoders/base.Generated)
        timings["generation_s"] += generated.pass_seconds_share - generated.pass_seconds_spent
    with timed(timings, "scoring_s", meter):
        pairs = deployment.score_pairs(prepared, generated if generate else None)
    check_finite(pairs, getattr(deployment, "label", type(deployment).__name__))
    known = generated.scores if generate and generated else None  # Best-of-N's stored sample scores
    _record_rendered_prompts(deployment, prepared)
    return _rows(prepared, index, generated, pairs, known or [{} for _ in batch]), timings


def check_finite(pairs: PairScores, label: str) -> None:
    """A NaN or infinite score would count as a wrong ranking (accuracy 0.00, no warning): the cell stops
    instead, in one line naming the deployment; finished batches and cells stay stored."""
    for what, ranked in (("policy scores", pairs.policy), ("rewards", pairs.reward)):
        if ranked is None:
            continue
        bad = sum(int((~np.isfinite(np.asarray(side, dtype=float))).sum()) for side in ranked)
        if bad:
            raise NonFiniteScores(f"{label}: {bad} of {2 * len(ranked[0])} {what} of a batch are not finite "
                                  "(NaN or ±inf); the cell is stopped, finished cells are kept")


def _record_rendered_prompts(deployment, prepared) -> None:
    """Each row keeps the prompt exactly as the policy read it (chat template, demonstrations, cuts): the
    `prompt` column is only the query's raw input. A soft-prompt method's learnt tokens come before it."""
    policy = getattr(getattr(deployment, "ctx", None), "policy", None)
    tokenizer = getattr(getattr(policy, "lm", None), "tokenizer", None)
    if tokenizer is not None:
        for columns, ids in zip(prepared.columns, prepared.prompts):
            columns["rendered_prompt"] = tokenizer.decode(ids)


def score_finished_cell(run, rows: list[dict]) -> tuple[list[dict], dict]:
    """Score every generation not yet scored, in the examples' order, batch_size at a time.

    Not in the cell's own batches: a learned metric's forward (BERTScore) depends in float
    noise on which texts share its batch, and the cell's batches depend on its prompts'
    lengths; scoring in fixed data-order groups keeps every reported score independent of
    the batching. Rows already scored (Best-of-N's stored samples, a resumed cell) are kept.
    """
    columns, timings = [c for metric in run.metrics for c in metric.columns], {"batch": "metrics"}
    todo = [r for r in rows if r.get("generation") is not None and not all(c in r for c in columns)]
    with timed(timings, "metrics_s"):
        for group in fixed_groups(todo if run.has_references else []):
            scores = score_generations(run.metrics, [r["generation"] for r in group], [r["reference"] for r in group])
            for row, score in zip(group, scores):
                row.update(score)
    return rows, timings


def _rows(prepared, index: int, generated: Generated | None, pairs: PairScores, scores: list[dict]) -> list[dict]:
    rows = []
    for i, ex in enumerate(prepared.examples):
        row = {"id": ex.id, "user": ex.comparison.user, "batch": index, "prompt": ex.comparison.prompt,
               "reference": ex.reference, "generation": generated.texts[i] if generated else None,
               **prepared.columns[i]}
        for prefix, name, ranked in (("s", "policy", pairs.policy), ("rm", "rm", pairs.reward)):
            if ranked is not None:
                outcome = pair_outcome(ranked[0][i], ranked[1][i])
                row.update({f"{prefix}_chosen": float(ranked[0][i]), f"{prefix}_rejected": float(ranked[1][i]),
                            f"{name}_correct": outcome["correct"], f"{name}_tie": outcome["tie"]})
        row.update(pairs.columns[i] if pairs.columns else {})
        row.update(generated.columns[i] if generated and generated.columns else {})
        if generated and generated.tokens:
            row["generated_tokens"] = generated.tokens[i]
        rows.append({**row, **scores[i]})
    return rows


# per-example 0/1 columns -> summary name (×100, macro over users)
RATE_COLUMNS = {
    "policy_correct": "policy_accuracy", "policy_tie": "policy_ties",
    "rm_correct": "rm_accuracy", "rm_tie": "rm_ties",
    "win": "win_rate", "win_tie": "win_ties",
    "judge_score": "judge_win_rate", "judge_user_score": "judge_user_win_rate",
    "judge_position_bias": "judge_position_bias", "judge_rouge_agree": "judge_rouge_agreement",
    "judge_invalid": "judge_invalid",
}


def summarize(rows: list[dict], score_columns: list[str]) -> dict:
    """Macro (over users) means of every per-example score and rate, plus pooled policy accuracy."""
    summary = {column: user_macro_mean(rows, column) for column in score_columns
               if any(r.get(column) is not None for r in rows)}  # pair-only data: no generation scores
    for column, name in RATE_COLUMNS.items():
        if any(column in row for row in rows):  # the judge's agreement with ROUGE exists on some rows only
            summary[name] = 100 * user_macro_mean(rows, column)
    if rows and "s_chosen" in rows[0]:
        pooled = ranking_accuracy([r["s_chosen"] for r in rows], [r["s_rejected"] for r in rows])
        summary["policy_accuracy_pooled"] = pooled["accuracy"]
    summary["examples"] = len(rows)
    summary["users"] = len({r["user"] for r in rows})
    summary["empty_generations"] = sum(1 for r in rows if r.get("generation") == "")
    if rows and "demo_ids" in rows[0]:  # shots are clipped per user to the support set: say what was used
        used = [len(r["demo_ids"]) for r in rows]
        summary.update(demos_used_mean=float(np.mean(used)), demos_used_min=int(min(used)))
    if rows and ("demo_ids" in rows[0] or "input_cut" in rows[0]):  # the prompts that did not fit whole
        summary["prompts_cut"] = sum(1 for r in rows if r.get("demos_dropped") or r.get("input_cut"))
    return summary


def run_cell(deployment, ctx) -> dict:
    """Evaluate every batch of the cell not yet on disk, then write its metrics.json."""
    run, cell = ctx.run, ctx.cell
    deployment.begin()
    batches = cell_batches(deployment, ctx)
    done = run.store.completed_batches(cell, [[ex.id for ex in b] for b in batches])
    label = f"{cell.decoder} | {cell.policy} | seed {cell.seed}"
    for index, batch in enumerate(tqdm(batches, desc=label, unit="batch", initial=0, leave=False, disable=None)):
        if index in done:
            continue
        rows, timings = evaluate_batch(deployment, run.generates, batch, index, ctx.policy.meter)
        run.store.append(cell, "rows.jsonl", rows)  # rows first: timings never outlive their rows
        run.store.append(cell, "timings.jsonl", [timings])
    rows, timings = score_finished_cell(run, in_example_order(run.store.read_rows(cell), run.examples))
    if run.judges is not None:
        from persalign.runner.judging import judge_finished_cell  # the judge's step reads this module's timer

        rows, judge_timings = judge_finished_cell(deployment, ctx, rows)
        timings.update({k: v for k, v in judge_timings.items() if k != "batch"})
    run.store.rewrite_rows(cell, rows)  # in the examples' order: the stored rows do not depend on the batching
    run.store.append(cell, "timings.jsonl", [timings])
    metrics = deployment.finish(cell_metrics(deployment, ctx, rows), rows)
    run.store.write_metrics(cell, metrics)
    return metrics


def cell_batches(deployment, ctx) -> list[list[Example]]:
    """The cell's examples in token-budget batches, shortest prompt first (by user first where the deployment
    shares a prefix per user); `batch_size` caps each batch.

    The plan depends only on the prompts and the config, so a resumed cell gets the same batches.
    """
    examples = ctx.run.examples
    users = [ex.comparison.user for ex in examples] if getattr(deployment, "batches_by_user", False) else None
    plan = plan_generation(deployment.prepare(examples).prompts, ctx.run.config.generation, ctx.policy.lm.device,
                           groups=users)
    return [[examples[i] for i in batch] for batch in plan]


def in_example_order(rows: list[dict], examples: list[Example]) -> list[dict]:
    position = {ex.id: i for i, ex in enumerate(examples)}
    return sorted(rows, key=lambda row: position.get(row["id"], len(position)))


def counted_work(rows: list[dict], ctx) -> dict | None:
    """The cell's counted generation work (persalign.engine.cost) and the shapes of the models it counts."""
    work = cell_work(rows)
    if work is None:
        return None
    models = {"policy": ctx.policy.shape.as_dict()}
    if ctx.trained is not None and hasattr(ctx.trained, "backbone"):
        models.update({k: v.as_dict() if v else None for k, v in reward_shapes(ctx.policy, ctx.trained).items()
                       if k != "policy"})
    return {**work, "models": models}


def stage_flops(timings: list[dict]) -> dict:
    """The cell's own metered FLOPs per stage (the same in a resumed run) and the shared work it did."""
    def total(suffix: str, skip: str | None = None) -> dict:
        keys = sorted({k for t in timings for k in t if k.endswith(suffix) and not (skip and k.endswith(skip))})
        return {key: float(np.sum([t.get(key, 0.0) for t in timings])) for key in keys}
    return {"stage_flops": total("_flops", skip="_shared_flops"), "stage_shared_flops": total("_shared_flops")}


def cell_metrics(deployment, ctx, rows: list[dict]) -> dict:
    run, planned = ctx.run, ctx.planned
    columns = [c for metric in run.metrics for c in metric.columns] + list(deployment.extra_columns)
    timings = run.store.read_jsonl(planned.cell, "timings.jsonl")
    stage_keys = sorted({k for t in timings for k in t if k.endswith("_s")})
    properties = deployment.properties
    return {
        "policy": planned.cell.policy, "decoder": planned.cell.decoder, "decoder_name": planned.decoder,
        "decoder_index": planned.decoder_index, "seed": planned.cell.seed,
        "seed_dependent": properties.seed_dependent, "deployment": {"name": planned.decoder, **properties.as_dict()},
        **summarize(rows, columns),
        "stage_seconds": {key: float(np.sum([t.get(key, 0.0) for t in timings])) for key in stage_keys},
        **stage_flops(timings),
        "counted_work": counted_work(rows, ctx),
        "peak_memory_mib": peak_memory_mib(), **peak_gpu_memory_mib(),
        "numerics": numerics(),  # the CPU, kernels and threads this cell was computed with
        "settings": {"decoder_name": planned.decoder, "decoder_index": planned.decoder_index,
                     **run.metric_settings(), **deployment.settings()},
    }
