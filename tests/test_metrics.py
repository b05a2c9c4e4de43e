import math

import pytest

from persalign.core.config import MetricsConfig
from persalign.metrics.generation import BertScoreMetric, RougeMetric
from persalign.metrics.ranking import pair_outcome, ranking_accuracy, user_macro_mean


def test_rouge_known_values():
    rouge = RougeMetric(MetricsConfig(rouge_stemmer=False))
    exact, half, none = rouge.score(["the cat sat", "the cat", "dog"], ["the cat sat", "the cat sat on mats", "the cat"])
    assert exact == {"rouge1": pytest.approx(100.0), "rougeL": pytest.approx(100.0)}
    # 2 matched unigrams; precision 2/2, recall 2/5 -> F1 = 2*1*0.4/1.4
    assert half["rouge1"] == pytest.approx(100 * 0.8 / 1.4)
    assert none["rouge1"] == 0.0


def test_rouge_stemming_setting_matters():
    plain = RougeMetric(MetricsConfig(rouge_stemmer=False)).score(["cats running"], ["cat runs"])[0]["rouge1"]
    stemmed = RougeMetric(MetricsConfig(rouge_stemmer=True)).score(["cats running"], ["cat runs"])[0]["rouge1"]
    assert plain == 0.0 and stemmed == pytest.approx(100.0)


def test_ranking_accuracy_is_strict_and_reports_ties():
    result = ranking_accuracy([1.0, 2.0, 3.0, 0.0], [0.0, 2.0, 4.0, -1.0])
    assert result == {"accuracy": 50.0, "ties": 25.0, "n": 4}
    assert pair_outcome(1.0, 1.0) == {"correct": 0.0, "tie": 1.0}
    assert math.isnan(ranking_accuracy([], [])["accuracy"])


def test_user_macro_mean_weights_users_equally():
    rows = [{"user": "a", "x": 1.0}, {"user": "a", "x": 1.0}, {"user": "a", "x": 1.0}, {"user": "b", "x": 0.0}]
    assert user_macro_mean(rows, "x") == pytest.approx(0.5)


@pytest.mark.needs_models
def test_bertscore_with_offline_minilm():
    metric = BertScoreMetric(MetricsConfig())
    same, different, empty = metric.score(
        ["Cats take over the city", "Quarterly earnings beat forecasts", ""],
        ["Cats take over the city", "Kittens seize downtown", "anything"],
    )
    assert same["bertscore_f1"] == pytest.approx(100.0, abs=1e-3)
    assert 0 < different["bertscore_f1"] < 90
    assert empty["bertscore_f1"] == 0.0
    assert metric.settings()["bertscore_layer"] == 6


def test_rouge_defaults_to_no_stemming_like_lamp_and_hf_evaluate():
    assert MetricsConfig().rouge_stemmer is False
    default = RougeMetric(MetricsConfig()).score(["cats running"], ["cat runs"])[0]["rouge1"]
    assert default == RougeMetric(MetricsConfig(rouge_stemmer=False)).score(["cats running"], ["cat runs"])[0]["rouge1"]


def test_report_names_the_bertscore_encoder_and_layer_and_the_rouge_setting():
    import pandas as pd

    from persalign.report.markdown import bertscore_title, metrics_line

    frame = pd.DataFrame({"settings": [{"rouge_stemmer": False, "bertscore_model": "minilm-l6", "bertscore_layer": 6,
                                        "rescaled": False}]})
    assert bertscore_title(frame) == "BERTScore-F1 (minilm-l6, layer 6)"
    assert "no stemming" in metrics_line(frame) and "encoder `minilm-l6`, layer 6" in metrics_line(frame)


def test_tldr_config_uses_appendix_f_latent_dimensions():
    from pathlib import Path

    from persalign.core.config import load_config

    config = load_config(str(Path(__file__).resolve().parents[1] / "configs" / "tldr.yaml"))
    dims = {m.name: m.settings.get("latent_dim") for m in config.methods}
    assert dims["lore"] == dims["lore_alt"] == dims["pal"] == dims["pref"] == 2
    assert config.reward.mode == "lora"
