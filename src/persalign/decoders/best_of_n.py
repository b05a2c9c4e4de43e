"""Best-of-N deployment of a trained reward model: keep the sample the user's RM scores highest.

One cell per reward method × policy × seed, beside (or instead of) ARGS. The
N_max samples of each query prompt are shared by every method
(decoders/best_of_n_samples.py); a method only scores them with its RM and
keeps, for each nested N, the best of the first N. Rows carry the pick, its
RM score and its generation metrics at every N (`rouge1@N`, `rm_score@N`);
the cell's headline metrics are those at N_max, and the quality-vs-N curves
go in its metrics.json. RM accuracy is computed on the same query pairs, so
the cells alone support the RM-accuracy vs Best-of-N correlation.

    persalign run configs/news_bon.yaml
"""

from __future__ import annotations

from persalign.core.registry import register_decoder
from persalign.decoders.args import plain_prompts
from persalign.decoders.base import (DeploymentProperties, Generated, PairScores, PreparedBatch, TrainedDeployment,
                                     pair_responses)
from persalign.decoders.best_of_n_samples import nested_best
from persalign.engine.cost import best_of_n_work, reward_shapes
from persalign.metrics.ranking import user_macro_mean
from persalign.rewards.policy_scoring import whole_response_rewards


@register_decoder("best_of_n")
class BestOfN(TrainedDeployment):
    """N_max shared samples per prompt; the user's RM picks the best of the first N."""

    switch = "best_of_n"
    properties = DeploymentProperties(seed_dependent=True, learns_from_pairs=True, ranks_with_reward_model=True,
                                      reranks_samples=True, needs="reward_model")
    index_block = 1  # report order: after every ARGS row
    extra_columns = ("rm_score",)
    always_generates = True  # without references the RM-score curve still says what N buys

    @staticmethod
    def label_for_method(method_label: str) -> str:
        return f"{method_label} (Best-of-N)"

    def __init__(self, ctx):
        super().__init__(ctx)
        self.samples = ctx.policy.samples
        self.options = ctx.run.config.best_of_n
        self.ns = sorted(self.options.ns)

    def prepare(self, examples: list) -> PreparedBatch:
        return plain_prompts(self.samples.formatter, examples)

    def generate(self, batch: PreparedBatch) -> Generated:
        records = self.samples.get(batch.examples, self.ctx.seed)
        n = max(self.ns)
        flat_users = [u for u in batch.users for _ in range(n)]
        flat_prompts = [p for p in batch.prompts for _ in range(n)]
        flat = [self.samples.formatter.response_ids(t) for r in records for t in r["samples"]]
        rewards = whole_response_rewards(self.trained.method, self.trained.backbone, flat_users, flat_prompts, flat)
        rewards = rewards.reshape(len(records), n)
        picks = nested_best(rewards.tolist(), self.ns)
        texts, scores, columns = [], [], []
        shapes, max_new = reward_shapes(self.ctx.policy, self.trained), self.generation.max_new_tokens
        for i, record in enumerate(records):
            lengths = [len(ids) for ids in flat[i * n : (i + 1) * n]]  # the samples as the RM reads them
            row = best_of_n_work(shapes, len(batch.prompts[i]), lengths, max_new).columns()
            for size in self.ns:
                pick = picks[size][i]
                row[f"rm_score@{size}"] = float(rewards[i, pick])
                row[f"generation@{size}"] = record["samples"][pick]  # what a judge reads at this N
                row.update({f"{column}@{size}": value for column, value in record["scores"][pick].items()})
            top = picks[n][i]
            row["rm_score"] = float(rewards[i, top])
            texts.append(record["samples"][top])
            scores.append(record["scores"][top])  # headline metrics: Best-of-N_max
            columns.append(row)
        return Generated(texts, scores=scores, columns=columns)

    def score_pairs(self, batch: PreparedBatch, generated: Generated | None) -> PairScores:
        formatter, n = self.samples.formatter, len(batch.examples)
        chosen, rejected = pair_responses(formatter, batch.examples)
        seq = whole_response_rewards(self.trained.method, self.trained.backbone, batch.users * 2, batch.prompts * 2,
                                     chosen + rejected)
        return PairScores(reward=(seq[:n], seq[n:]))

    def settings(self) -> dict:
        return {"ns": self.ns, "temperature": self.options.temperature,
                **self.training_settings()}

    def finish(self, metrics: dict, rows: list[dict]) -> dict:
        """The quality-vs-N curves (ROUGE-1, BERTScore-F1, RM score, judged score) in the cell's metrics.json."""
        curves = {c: bon_curve(rows, self.ns, c) for c in ("rouge1", "bertscore_f1", "rm_score")}
        curves["judge_win_rate"] = {n: 100 * v for n, v in bon_curve(rows, self.ns, "judge_score").items()}
        metrics["settings"]["curves"] = curves
        return metrics

    def summary_line(self, metrics: dict) -> str:
        curves = metrics.get("settings", {}).get("curves", {})
        parts = [f"{c}: " + ", ".join(f"N={k} {v:.2f}" for k, v in curve.items())
                 for c, curve in curves.items() if curve]
        return f"RM acc {metrics['rm_accuracy']:.2f}, " + ("; ".join(parts) if parts else "-")


def bon_curve(rows: list[dict], ns: list[int], column: str) -> dict[int, float]:
    """Mean over users of `column@N` for each N (ROUGE-1 curve, or the RM-score curve without references)."""
    return {size: float(user_macro_mean(rows, f"{column}@{size}")) for size in ns
            if rows and f"{column}@{size}" in rows[0]}
