"""ICL demonstrations come from the user's own support set only, deterministically."""

import pytest

from persalign.config import DataConfig, DecoderConfig, SplitConfig
from persalign.data.preflamp import build_pref_lamp
from persalign.data.split import make_split
from persalign.data.writing import keep_active_users
from persalign.decoders.base import EvalContext
from persalign.errors import ConfigError
from persalign.models.embedders import CachedEmbedder, HashingBowEmbedder
from persalign.registry import DATASETS, DECODERS


@pytest.fixture(scope="module")
def context():
    writing = keep_active_users(DATASETS.get("demo")(DataConfig()), DataConfig())
    embedder = CachedEmbedder(HashingBowEmbedder(), None)
    dataset = build_pref_lamp(writing, embedder, SplitConfig(adapt_fraction=0.25), top_k=5, seed=0)
    return EvalContext(dataset, make_split(dataset, SplitConfig(adapt_fraction=0.25)), embedder)


def query_items(context):
    return [(u, context.items[i]) for u in context.split.adapt_users for i in context.split.query[u]]


@pytest.mark.parametrize("name", ["icl", "icl_rag"])
def test_demos_are_the_users_own_support_items(context, name):
    decoder = DECODERS.get(name)(DecoderConfig(name, shots=4))
    for user, item in query_items(context):
        demos = decoder.demos(context, user, item.id, item.input, seed=0)
        assert len(demos) == 4
        assert all(d.user == user for d in demos)
        assert all(d.id in context.split.support[user] for d in demos)
        assert item.id not in {d.id for d in demos}


def test_random_icl_is_seeded_per_example(context):
    decoder = DECODERS.get("icl")(DecoderConfig("icl", shots=3))
    user, item = query_items(context)[0]
    first = decoder.demos(context, user, item.id, item.input, seed=0)
    assert first == decoder.demos(context, user, item.id, item.input, seed=0)
    draws = {tuple(d.id for d in decoder.demos(context, user, item.id, item.input, seed=s)) for s in range(6)}
    assert len(draws) > 1


def test_rag_returns_the_most_similar_items_first(context):
    decoder = DECODERS.get("icl_rag")(DecoderConfig("icl_rag", shots=3))
    user, item = query_items(context)[0]
    demos = decoder.demos(context, user, item.id, item.input, seed=0)
    pool = context.demo_pool(user)
    vectors = context.embedder.encode([item.input] + [p.input for p in pool])
    sims = sorted((float(vectors[1 + j] @ vectors[0]) for j in range(len(pool))), reverse=True)
    got = [float(context.embedder.encode([d.input])[0] @ vectors[0]) for d in demos]
    assert got == pytest.approx(sims[:3])


def test_shots_must_be_positive():
    with pytest.raises(ConfigError, match="shots must be >= 1"):
        DECODERS.get("icl")(DecoderConfig("icl", shots=0))
