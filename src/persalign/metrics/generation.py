"""Generation metrics against the user's own completion (paper §5, Eq. 8).

- ROUGE-1 / ROUGE-L F1 (×100) via `rouge-score`; the stemming setting is recorded.
- BERTScore-F1 (×100) via `bert-score` with a configurable encoder (default the
  offline all-MiniLM-L6-v2, last layer, no baseline rescaling). An empty
  generation scores 0 (nothing matches), without calling the encoder.

Per-example scores are stored in each result row; summaries average them.

    persalign run demo metrics.names='[rouge]'
"""

from __future__ import annotations

from persalign.config import MetricsConfig
from persalign.errors import ConfigError
from persalign.registry import register_metric


def score_generations(metrics: list, generations: list[str], references: list[str]) -> list[dict[str, float]]:
    """Every metric's per-example scores, merged into one dict per example."""
    scores = [dict() for _ in generations]
    for metric in metrics:
        for row, values in zip(scores, metric.score(generations, references)):
            row.update(values)
    return scores


@register_metric("rouge")
class RougeMetric:
    """ROUGE-1 and ROUGE-L F1 (×100), rouge-score's tokenizer, Porter stemming if set."""

    columns = ("rouge1", "rougeL")

    def __init__(self, config: MetricsConfig, cache_dir: str | None = None):
        from rouge_score import rouge_scorer

        self.stemmer = config.rouge_stemmer
        self.scorer = rouge_scorer.RougeScorer(["rouge1", "rougeL"], use_stemmer=self.stemmer)

    def settings(self) -> dict:
        return {"rouge_stemmer": self.stemmer, "package": "rouge-score"}

    def score(self, generations: list[str], references: list[str]) -> list[dict[str, float]]:
        rows = []
        for generation, reference in zip(generations, references):
            result = self.scorer.score(reference, generation)
            rows.append({"rouge1": 100 * result["rouge1"].fmeasure, "rougeL": 100 * result["rougeL"].fmeasure})
        return rows


@register_metric("bertscore")
class BertScoreMetric:
    """BERTScore-F1 (×100) with a configurable encoder (default offline MiniLM)."""

    columns = ("bertscore_f1",)

    def __init__(self, config: MetricsConfig, cache_dir: str | None = None):
        from bert_score import BERTScorer
        from transformers import AutoConfig

        from persalign.models.loading import from_pretrained, resolve_model_path

        path = resolve_model_path(config.bertscore_model, cache_dir)
        layers = from_pretrained(AutoConfig, path, f"BERTScore encoder {config.bertscore_model!r}",
                                 "set metrics.bertscore_model").num_hidden_layers
        if config.bertscore_layer is not None and not 1 <= config.bertscore_layer <= layers:
            raise ConfigError(f"config.metrics.bertscore_layer: {config.bertscore_layer} is not allowed (must be a "
                              f"layer of {config.bertscore_model!r}: 1 to {layers})")
        self.layer = config.bertscore_layer or layers
        self.model = config.bertscore_model
        self.scorer = BERTScorer(model_type=path, num_layers=self.layer, rescale_with_baseline=False)

    def settings(self) -> dict:
        return {"bertscore_model": self.model, "bertscore_layer": self.layer, "rescaled": False}

    def score(self, generations: list[str], references: list[str]) -> list[dict[str, float]]:
        scores = [0.0] * len(generations)
        nonempty = [i for i, g in enumerate(generations) if g.strip()]
        if nonempty:
            _, _, f1 = self.scorer.score([generations[i] for i in nonempty], [references[i] for i in nonempty])
            for i, value in zip(nonempty, f1.tolist()):
                scores[i] = 100 * value
        return [{"bertscore_f1": s} for s in scores]
