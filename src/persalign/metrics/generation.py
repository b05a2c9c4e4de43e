"""Generation metrics against the user's own completion (paper §5, Eq. 8).

- ROUGE-1 / ROUGE-L F1 (×100) via `rouge-score`; the stemming setting is recorded.
- BERTScore-F1 (×100) via `bert-score` with a configurable encoder (default the
  offline all-MiniLM-L6-v2, last layer, no baseline rescaling). An empty
  generation scores 0 (nothing matches), without calling the encoder.

Per-example scores are stored in each result row; summaries average them.

    persalign run demo metrics.names='[rouge]'
"""

from __future__ import annotations

from persalign.core.config import MetricsConfig
from persalign.core.errors import ConfigError
from persalign.core.registry import register_metric


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
    """BERTScore-F1 (×100) with a configurable encoder (default offline MiniLM), computed by bert-score's
    own `bert_cos_score_idf` on an encoder persalign loads itself: bert-score's loader picks the architecture
    from the name (any path containing "t5" became a randomly initialised T5 encoder, exit 0)."""

    columns = ("bertscore_f1",)

    def __init__(self, config: MetricsConfig, cache_dir: str | None = None):
        from persalign.models.loading import encoder_layers, load_encoder, resolve_model_path

        what, hint = f"BERTScore encoder {config.bertscore_model!r}", "set metrics.bertscore_model"
        path = resolve_model_path(config.bertscore_model, cache_dir)
        layers = encoder_layers(path, what, hint)
        if config.bertscore_layer is not None and not 1 <= config.bertscore_layer <= layers:
            raise ConfigError(f"config.metrics.bertscore_layer: {config.bertscore_layer} is not allowed (must be a "
                              f"layer of {config.bertscore_model!r}: 1 to {layers})")
        self.layer = config.bertscore_layer or layers
        self.encoder, self.tokenizer = load_encoder(path, what, hint)
        keep_first_layers(self.encoder, self.layer)  # bert-score reads the last layer the model returns
        self.model = config.bertscore_model

    def settings(self) -> dict:
        return {"bertscore_model": self.model, "bertscore_layer": self.layer, "rescaled": False}

    def score(self, generations: list[str], references: list[str]) -> list[dict[str, float]]:
        from collections import defaultdict

        from bert_score.utils import bert_cos_score_idf

        scores = [0.0] * len(generations)
        nonempty = [i for i, g in enumerate(generations) if g.strip()]
        if nonempty:
            idf = defaultdict(lambda: 1.0)  # no idf weighting, as BERTScorer(idf=False)
            idf[self.tokenizer.sep_token_id] = 0
            idf[self.tokenizer.cls_token_id] = 0
            device = str(next(self.encoder.parameters()).device)
            precision_recall_f1 = bert_cos_score_idf(
                self.encoder, [references[i] for i in nonempty], [generations[i] for i in nonempty],
                self.tokenizer, idf, batch_size=64, device=device).cpu()
            for i, value in zip(nonempty, precision_recall_f1[:, 2].tolist()):
                scores[i] = 100 * value
        return [{"bertscore_f1": s} for s in scores]


def keep_first_layers(encoder, count: int) -> None:
    """Drop the encoder's layers after the first `count` (as bert-score does for its `num_layers`)."""
    import torch

    for owner, name in ((encoder, "layer"), (getattr(encoder, "encoder", None), "layer"), (encoder, "layers"),
                        (getattr(encoder, "encoder", None), "block"), (encoder, "block")):
        layers = getattr(owner, name, None) if owner is not None else None
        if isinstance(layers, torch.nn.ModuleList):
            setattr(owner, name, torch.nn.ModuleList(list(layers)[:count]))
            return
    raise ConfigError(f"metrics.bertscore_model: {type(encoder).__name__} has no list of layers persalign "
                      "knows how to cut (BERT-, RoBERTa- and T5-style encoders do)")
