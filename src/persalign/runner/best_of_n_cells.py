"""Best-of-N cells: one cell per reward method × policy × seed, beside (or instead of) ARGS.

The N_max samples of each query prompt are drawn ONCE per policy × seed
(seeded, stored in RUN_DIR/samples/POLICY/seed-N.jsonl with their ROUGE /
BERTScore against the user's text when there is one) and reused by every
method: a method only scores them with its RM and keeps, for each nested N,
the best of the first N (best_of_n.nested_best). Rows carry the pick, its RM
score and its generation metrics at every N (`rouge1@N`, `rm_score@N`); the
cell's headline metrics are those at N_max, so Best-of-N appears in the
report's tables like any deployment. RM accuracy is computed on the same
query pairs, so the cells alone support the RM-accuracy vs Best-of-N
correlation (the Personalized RewardBench claim).

    persalign run configs/news_bon.yaml
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field

from persalign.best_of_n import nested_best, sample_responses
from persalign.metrics.generation import score_generations
from persalign.metrics.ranking import pair_outcome
from persalign.rewards.policy_scoring import reward_sums
from persalign.runner.reward_cells import TrainedReward


@dataclass
class SampleStore:
    """Samples per policy × seed, appended per batch so an interrupted run keeps what it drew."""

    root: object
    policy: object
    formatter: object
    metrics: list
    bon: object  # BestOfNConfig
    max_new_tokens: int
    loaded: dict = field(default_factory=dict)  # seed -> {example id: record}: the file is read once per seed

    def path(self, seed: int):
        return self.root / "samples" / self.policy.name.replace("/", "_") / f"seed-{seed}.jsonl"

    def get(self, batch, seed: int) -> list[dict]:
        path = self.path(seed)
        if seed not in self.loaded:
            lines = path.read_text(encoding="utf-8").splitlines(keepends=True) if path.exists() else []
            records = [json.loads(line) for line in lines if line.endswith("\n")]  # a torn last line is redrawn
            self.loaded[seed] = {record["id"]: record for record in records}
        known = self.loaded[seed]
        missing = [ex for ex in batch if ex.id not in known]
        if missing:
            prompts = [self.formatter.prompt_ids(ex.comparison.prompt, history=ex.comparison.history) for ex in missing]
            n = max(self.bon.ns)
            texts = sample_responses(self.policy, prompts, n, self.max_new_tokens, seed, key=missing[0].id,
                                     temperature=self.bon.temperature)
            path.parent.mkdir(parents=True, exist_ok=True)
            with path.open("a", encoding="utf-8") as handle:
                for ex, samples in zip(missing, texts):
                    reference = ex.completion.reference if ex.completion else None
                    scores = score_generations(self.metrics, samples, [reference] * n) if reference else [{}] * n
                    record = {"id": ex.id, "samples": samples, "scores": scores}
                    known[ex.id] = record
                    handle.write(json.dumps(record, ensure_ascii=False) + "\n")
        return [known[ex.id] for ex in batch]


@dataclass
class BestOfNCellJob:
    cell: object
    trained: TrainedReward
    samples: SampleStore
    ns: list[int]
    batch_size: int
    extra_columns: tuple = ("rm_score",)

    @property
    def metrics(self) -> list:
        return self.samples.metrics


def evaluate_bon_batch(job: BestOfNCellJob, batch, batch_index: int) -> tuple[list[dict], dict]:
    timings = {"batch": batch_index}
    start = time.perf_counter()
    records = job.samples.get(batch, job.cell.seed)
    timings["sampling_s"] = time.perf_counter() - start

    start = time.perf_counter()
    formatter = job.samples.formatter
    users = [ex.comparison.user for ex in batch]
    prompts = [formatter.prompt_ids(ex.comparison.prompt, history=ex.comparison.history) for ex in batch]
    n = max(job.ns)
    flat_users = [u for u in users for _ in range(n)]
    flat_prompts = [p for p in prompts for _ in range(n)]
    flat = [formatter.response_ids(t) for r in records for t in r["samples"]]
    rewards, _ = reward_sums(job.trained.method, job.trained.backbone, flat_users, flat_prompts, flat)
    rewards = rewards.reshape(len(batch), n)
    chosen = [formatter.response_ids(ex.comparison.chosen) for ex in batch]
    rejected = [formatter.response_ids(ex.comparison.rejected) for ex in batch]
    seq, _ = reward_sums(job.trained.method, job.trained.backbone, users * 2, prompts * 2, chosen + rejected)
    picks = nested_best(rewards.tolist(), job.ns)
    timings["scoring_s"] = time.perf_counter() - start

    rows = []
    for i, (ex, record) in enumerate(zip(batch, records)):
        rm = pair_outcome(seq[i], seq[len(batch) + i])
        row = {"id": ex.id, "user": ex.comparison.user, "batch": batch_index, "prompt": ex.comparison.prompt,
               "reference": ex.completion.reference if ex.completion else None,
               "rm_chosen": float(seq[i]), "rm_rejected": float(seq[len(batch) + i]),
               "rm_correct": rm["correct"], "rm_tie": rm["tie"]}
        for size in job.ns:
            pick = picks[size][i]
            row[f"rm_score@{size}"] = float(rewards[i, pick])
            for column, value in record["scores"][pick].items():
                row[f"{column}@{size}"] = value
        top = picks[n][i]
        row["generation"] = record["samples"][top]
        row.update(record["scores"][top])  # headline metrics: Best-of-N_max
        row["rm_score"] = float(rewards[i, top])
        rows.append(row)
    return rows, timings


def bon_curve(rows: list[dict], ns: list[int], column: str) -> dict[int, float]:
    """Mean over users of `column@N` for each N (ROUGE-1 curve, or the RM-score curve without references)."""
    from persalign.metrics.ranking import user_macro_mean

    return {size: float(user_macro_mean(rows, f"{column}@{size}")) for size in ns
            if rows and f"{column}@{size}" in rows[0]}


def add_curves(store, cell, ns: list[int]) -> dict:
    """Store the quality-vs-N curves (ROUGE-1, BERTScore-F1, RM score) in the cell's metrics.json."""
    metrics = json.loads((store.cell_dir(cell) / "metrics.json").read_text())
    rows = store.read_rows(cell)
    metrics["settings"]["curves"] = {c: bon_curve(rows, ns, c) for c in ("rouge1", "bertscore_f1", "rm_score")}
    store.write_metrics(cell, metrics)
    return metrics


def summarize_curves(metrics: dict) -> str:
    curves = metrics.get("settings", {}).get("curves", {})
    parts = [f"{c}: " + ", ".join(f"N={k} {v:.2f}" for k, v in curve.items()) for c, curve in curves.items() if curve]
    return "; ".join(parts) if parts else "-"
