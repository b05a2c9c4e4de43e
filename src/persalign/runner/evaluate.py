"""Evaluate one cell (decoder × policy × seed) on the adaptation users' query items.

For each batch of query examples: build each prompt (with the decoder's
demonstrations), generate greedily, score the chosen and rejected responses
with the same prompt (s_base for zero-shot, s_ICL for ICL: Eq. 4 / 7), and
score the generation against the user's own text. One row per example.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
from tqdm.auto import tqdm

from persalign.decoding import clean_generation, decode_from, greedy, prefill
from persalign.metrics.generation import score_generations
from persalign.metrics.ranking import pair_outcome, ranking_accuracy, user_macro_mean
from persalign.prompts import PromptFormatter
from persalign.records import Comparison, Completion
from persalign.runner.provenance import peak_memory_mib
from persalign.runner.store import Cell, RunStore
from persalign.scoring import logprobs_from_prefill, mean_logprob


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


@dataclass
class CellJob:
    cell: Cell
    decoder: object
    lm: object
    formatter: PromptFormatter
    context: object
    metrics: list  # metric objects with .score(generations, references)
    batch_size: int
    max_new_tokens: int
    generate: bool = True  # False for pair-only data: ranking only, no reference to score a generation against


def _evaluate_batch(job: CellJob, batch: list[Example], batch_index: int) -> tuple[list[dict], dict]:
    timings = {"batch": batch_index}
    start = time.perf_counter()
    demos = [
        job.decoder.demos(job.context, ex.comparison.user, ex.id, ex.comparison.prompt, job.cell.seed) for ex in batch
    ]
    prompts = [job.formatter.prompt_ids(ex.comparison.prompt, d, ex.comparison.history)
               for ex, d in zip(batch, demos)]
    timings["prompts_s"] = time.perf_counter() - start

    start = time.perf_counter()
    state = prefill(job.lm, prompts)  # one pass over the prompts serves generation and scoring
    generations = [None] * len(batch)
    if job.generate:
        generated = decode_from(job.lm, state, greedy, job.max_new_tokens)
        generations = [clean_generation(job.lm.tokenizer, ids) for ids in generated]
    timings["generation_s"] = time.perf_counter() - start

    start = time.perf_counter()
    chosen = [job.formatter.response_ids(ex.comparison.chosen) for ex in batch]
    rejected = [job.formatter.response_ids(ex.comparison.rejected) for ex in batch]
    chosen_lp, rejected_lp = logprobs_from_prefill(job.lm, state, [chosen, rejected])
    logprobs = chosen_lp + rejected_lp
    timings["scoring_s"] = time.perf_counter() - start

    scores = score_batch(job.metrics, job.generate, generations, batch, timings)

    rows = []
    for i, ex in enumerate(batch):
        s_chosen, s_rejected = mean_logprob(logprobs[i]), mean_logprob(logprobs[len(batch) + i])
        outcome = pair_outcome(s_chosen, s_rejected)
        rows.append({
            "id": ex.id, "user": ex.comparison.user, "batch": batch_index,
            "prompt": ex.comparison.prompt, "reference": ex.reference,
            "generation": generations[i], "demo_ids": [d.id for d in demos[i]],
            "prompt_tokens": len(prompts[i]),
            "s_chosen": s_chosen, "s_rejected": s_rejected,
            "policy_correct": outcome["correct"], "policy_tie": outcome["tie"],
            **scores[i],
        })
    return rows, timings


def score_batch(metrics, generate: bool, generations, batch, timings: dict) -> list[dict]:
    """Generation metrics against each example's reference (none for pair-only data), timed."""
    start = time.perf_counter()
    scores = score_generations(metrics, generations, [ex.reference for ex in batch]) if generate \
        else [{} for _ in batch]
    timings["metrics_s"] = time.perf_counter() - start
    return scores


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


def run_cell(job, store: RunStore, examples: list[Example], settings: dict, evaluate_batch=None,
             seed_dependent: bool | None = None) -> dict:
    """Evaluate every batch not yet on disk, then write the cell's metrics.json."""
    evaluate_batch = evaluate_batch or _evaluate_batch
    batches = [examples[i : i + job.batch_size] for i in range(0, len(examples), job.batch_size)]
    cell = job.cell
    done = store.completed_batches(cell, [[ex.id for ex in b] for b in batches])
    label = f"{cell.decoder} | {cell.policy} | seed {cell.seed}"
    for index, batch in enumerate(tqdm(batches, desc=label, unit="batch", initial=0, leave=False)):
        if index in done:
            continue
        rows, timings = evaluate_batch(job, batch, index)
        store.append(cell, "rows.jsonl", rows)  # rows first: timings never outlive their rows
        store.append(cell, "timings.jsonl", [timings])
    rows = store.read_rows(cell)
    columns = [c for metric in job.metrics for c in metric.columns] + list(getattr(job, "extra_columns", ()))
    timings = store.read_jsonl(cell, "timings.jsonl")
    stage_keys = sorted({k for t in timings for k in t if k.endswith("_s")})
    stage_seconds = {key: float(np.sum([t.get(key, 0.0) for t in timings])) for key in stage_keys}
    metrics = {
        "policy": cell.policy, "decoder": cell.decoder, "decoder_name": settings["decoder_name"],
        "decoder_index": settings["decoder_index"], "seed": cell.seed,
        "seed_dependent": job.decoder.seed_dependent if seed_dependent is None else seed_dependent,
        **summarize(rows, columns),
        "stage_seconds": stage_seconds, "peak_memory_mib": peak_memory_mib(),
        "settings": settings,
    }
    store.write_metrics(cell, metrics)
    return metrics
