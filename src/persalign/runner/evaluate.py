"""The one evaluator: any deployment, any cell, batch by batch through the run store.

For each batch of query examples not yet on disk: the deployment builds the
prompts, generates (where the data has the users' own outputs to compare
with), ranks each (chosen, rejected) pair with its own scoring function, and
the generation is scored against the user's own text; one row per example is
appended to the cell's rows.jsonl with the batch's stage timings. When every
batch is stored the cell's metrics.json is written from the rows.

    persalign run demo -o runs/demo
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
from tqdm.auto import tqdm

from persalign.decoders.base import Generated, PairScores
from persalign.metrics.generation import score_generations
from persalign.metrics.ranking import pair_outcome, ranking_accuracy, user_macro_mean
from persalign.records import Comparison, Completion
from persalign.runner.provenance import peak_memory_mib


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
def timed(timings: dict, key: str):
    start = time.perf_counter()
    yield
    timings[key] = time.perf_counter() - start


def evaluate_batch(deployment, generate: bool, metrics: list, batch: list[Example], index: int):
    """One batch of any deployment: (rows, stage timings)."""
    timings = {"batch": index}
    with timed(timings, "prompts_s"):
        prepared = deployment.prepare(batch)
    generated = None
    with timed(timings, "generation_s"):
        if generate or deployment.always_generates:
            generated = deployment.generate(prepared)
    with timed(timings, "scoring_s"):
        pairs = deployment.score_pairs(prepared, generated if generate else None)
    with timed(timings, "metrics_s"):
        scores = generation_scores(metrics, generate, generated, batch)
    return _rows(prepared, index, generated, pairs, scores), timings


def generation_scores(metrics: list, generate: bool, generated: Generated | None, batch) -> list[dict]:
    """Each generation against its example's reference (none for pair-only data; known ones are reused)."""
    if not generate or generated is None:
        return [{} for _ in batch]
    if generated.scores is not None:
        return generated.scores
    return score_generations(metrics, generated.texts, [ex.reference for ex in batch])


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
}


def summarize(rows: list[dict], score_columns: list[str]) -> dict:
    """Macro (over users) means of every per-example score and rate, plus pooled policy accuracy."""
    summary = {column: user_macro_mean(rows, column) for column in score_columns
               if any(r.get(column) is not None for r in rows)}  # pair-only data: no generation scores
    for column, name in RATE_COLUMNS.items():
        if rows and column in rows[0]:
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
    return summary


def run_cell(deployment, ctx) -> dict:
    """Evaluate every batch of the cell not yet on disk, then write its metrics.json."""
    run, cell = ctx.run, ctx.cell
    deployment.begin()
    size = run.config.generation.batch_size
    batches = [run.examples[i : i + size] for i in range(0, len(run.examples), size)]
    done = run.store.completed_batches(cell, [[ex.id for ex in b] for b in batches])
    label = f"{cell.decoder} | {cell.policy} | seed {cell.seed}"
    for index, batch in enumerate(tqdm(batches, desc=label, unit="batch", initial=0, leave=False)):
        if index in done:
            continue
        rows, timings = evaluate_batch(deployment, run.generates, run.metrics, batch, index)
        run.store.append(cell, "rows.jsonl", rows)  # rows first: timings never outlive their rows
        run.store.append(cell, "timings.jsonl", [timings])
    rows = run.store.read_rows(cell)
    metrics = deployment.finish(cell_metrics(deployment, ctx, rows), rows)
    run.store.write_metrics(cell, metrics)
    return metrics


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
        "peak_memory_mib": peak_memory_mib(),
        "settings": {"decoder_name": planned.decoder, "decoder_index": planned.decoder_index,
                     **run.metric_settings(), **deployment.settings()},
    }
