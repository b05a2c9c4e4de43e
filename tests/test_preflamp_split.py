"""Pref-LaMP builder (paper §5) and the user split (§3.1)."""

import dataclasses

import numpy as np
import pytest

from persalign.core.config import DataConfig, SplitConfig
from persalign.core.errors import DataError
from persalign.core.registry import DATASETS
from persalign.data.preflamp import build_pref_lamp, hard_negative_indices
from persalign.data.split import make_split
from persalign.data.writing import keep_active_users
from persalign.models.embedders import HashingBowEmbedder


@pytest.fixture(scope="module")
def demo_writing():
    return keep_active_users(DATASETS.get("demo")(DataConfig()), DataConfig())


@pytest.fixture(scope="module")
def demo_dataset(demo_writing):
    """The demo's pairs as a plain pair data set: the split tests below split it in several ways, which a
    Pref-LaMP data set refuses (its negatives were mined under one split)."""
    built = build_pref_lamp(demo_writing, HashingBowEmbedder(), SplitConfig(), top_k=5, seed=0)
    return dataclasses.replace(built, notes={})


def test_the_split_is_required_and_a_pref_lamp_set_refuses_any_other_split(demo_writing):
    """Issue #28: built without a split, negatives were mined under the default one; a caller splitting
    differently then trained on query texts as negatives."""
    with pytest.raises(TypeError):
        build_pref_lamp(demo_writing, HashingBowEmbedder(), top_k=5, seed=0)
    mined_under = SplitConfig(adapt_fraction=0.25, seed=3)
    dataset = build_pref_lamp(demo_writing, HashingBowEmbedder(), mined_under, top_k=5, seed=0)
    assert make_split(dataset, mined_under).adapt_users
    with pytest.raises(DataError, match="negatives were mined under the split"):
        make_split(dataset, SplitConfig(adapt_fraction=0.25, seed=4))


def test_rejected_always_comes_from_another_user(demo_writing, demo_dataset):
    outputs_by_user = {}
    for item in demo_writing.items:
        outputs_by_user.setdefault(item.user, set()).add(item.output)
    assert len(demo_dataset.comparisons) == len(demo_writing.items)
    for c in demo_dataset.comparisons:
        assert c.chosen in outputs_by_user[c.user]
        assert c.rejected not in outputs_by_user[c.user]
        assert c.chosen != c.rejected


def test_retrieved_neighbours_are_more_similar_than_random(demo_writing):
    embeddings = HashingBowEmbedder().encode([i.input for i in demo_writing.items])
    users = [i.user for i in demo_writing.items]
    picks, neighbours = hard_negative_indices(embeddings, users, top_k=5, seed=0)
    rng = np.random.default_rng(1)
    rows = np.arange(len(users))
    neighbour_sim = np.mean(np.einsum("id,id->i", embeddings, embeddings[picks]))
    random_others = np.array([rng.choice([j for j in rows if users[j] != users[i]]) for i in rows])
    random_sim = np.mean(np.einsum("id,id->i", embeddings, embeddings[random_others]))
    assert neighbour_sim > random_sim + 0.2
    assert all(users[j] != users[i] for i in rows for j in neighbours[i])


def test_builder_is_deterministic_and_seed_matters(demo_writing):
    a = build_pref_lamp(demo_writing, HashingBowEmbedder(), SplitConfig(), top_k=5, seed=0)
    b = build_pref_lamp(demo_writing, HashingBowEmbedder(), SplitConfig(), top_k=5, seed=0)
    c = build_pref_lamp(demo_writing, HashingBowEmbedder(), SplitConfig(), top_k=5, seed=1)
    assert a.comparisons == b.comparisons
    assert a.comparisons != c.comparisons


def test_split_is_disjoint_complete_and_deterministic(demo_dataset):
    config = SplitConfig(adapt_fraction=0.25, support_fraction=0.5, heldout_fraction=0.2, seed=3)
    split = make_split(demo_dataset, config)
    assert not set(split.train_users) & set(split.adapt_users)
    assert len(split.adapt_users) == 8 and len(split.train_users) == 24  # a quarter of the 32 demo authors
    seen = []
    for sets in split.sets().values():
        for ids in sets.values():
            seen += ids
    assert len(seen) == len(set(seen)) == len(demo_dataset.comparisons)  # every pair in exactly one set
    for user in split.adapt_users:
        assert split.support[user] and split.query[user]
    assert make_split(demo_dataset, config) == split
    assert make_split(demo_dataset, SplitConfig(seed=4)) != split


def test_query_cap_drops_rather_than_moves(demo_dataset):
    split = make_split(demo_dataset, SplitConfig(max_query_per_user=3))
    assert all(len(split.query[u]) == 3 for u in split.adapt_users)
    assert not any(set(split.query[u]) & set(split.support[u]) for u in split.adapt_users)


def test_most_active_split_shape_like_tldr(demo_dataset):
    from persalign.core.records import Comparison, PreferenceDataset

    pairs = [Comparison(f"{u}-{i}", u, f"post {u}-{i}", "a", "b") for u, n in [("w1", 30), ("w2", 25), ("w3", 12), ("w4", 12),
                                                                    ("w5", 3)] for i in range(n)]
    dataset = PreferenceDataset("toy", "summary", pairs)
    split = make_split(dataset, SplitConfig(train_top_users=2, adapt_pairs_per_user=10))
    assert split.train_users == ["w1", "w2"] and split.adapt_users == ["w3", "w4"]  # w5 has too few pairs
    assert all(len(split.support[u]) + len(split.query[u]) == 10 for u in split.adapt_users)


def exact_stable_top_k(embeddings, user_ids, rows, pool, k):
    """What mining must return: per row the k pool items of another user with the largest float64-computed
    similarity (rounded to float32, as `embedders.similarities`), largest first, ties by pool position."""
    from persalign.models.embedders import similarities

    sims = similarities(embeddings[rows], embeddings[pool])
    sims[user_ids[rows][:, None] == user_ids[pool][None, :]] = -np.inf
    return pool[np.argsort(-sims, axis=1, kind="stable")[:, :k]]


def near_duplicates(rng, n: int, dim: int, jitter: float, on_a_grid: bool) -> np.ndarray:
    """L2-normalised float32 vectors, ~10 copies of each of n / 10 bases, jittered (or rounded: exact ties)."""
    base = rng.standard_normal((max(3, n // 10), dim))
    vectors = base[rng.integers(0, len(base), n)] + jitter * rng.standard_normal((n, dim))
    vectors = np.round(vectors * 4) / 4 if on_a_grid else vectors
    return (vectors / np.linalg.norm(vectors, axis=1, keepdims=True)).astype(np.float32)


def test_mining_picks_the_exact_top_k_from_its_float32_filter(monkeypatch):
    """Mining filters with numpy's float32 product (fast; its last bits follow the thread count and the CPU)
    and scores the survivors in float64: the neighbours must be exactly the stable top k of the float64
    similarities (ties by pool position), in blocks of any size. The float32 product alone picks other ones
    on these near-duplicates: what the filter's error margin is for."""
    from persalign.data import mining

    rng, float32_alone_differs = np.random.default_rng(0), 0
    for trial in range(24):
        n, dim = int(rng.integers(50, 300)), int(rng.choice([8, 64, 384]))
        embeddings = near_duplicates(rng, n, dim, float(rng.choice([0, 1e-7, 1e-5, 1e-3])), trial % 3 == 0)
        user_ids, rows = rng.integers(0, max(2, n // 5), n), np.arange(n)
        pool = rng.permutation(n)[: max(10, n // 2)]
        monkeypatch.setattr(mining, "BLOCK_ELEMENTS", 997 if trial % 2 else 50_000_000)
        _, neighbours = mining.mine_negatives(embeddings, user_ids, rows, pool, 5, np.random.default_rng(1))
        assert (neighbours == exact_stable_top_k(embeddings, user_ids, rows, pool, neighbours.shape[1])).all()
        fast = embeddings[rows] @ embeddings[pool].T
        fast[user_ids[rows][:, None] == user_ids[pool][None, :]] = -np.inf
        float32_alone_differs += (pool[np.argsort(-fast, axis=1, kind="stable")[:, :5]] != neighbours).any()
    assert float32_alone_differs >= 3, float32_alone_differs  # measured: 24 of 24


def test_mining_says_up_front_what_a_large_data_set_costs():
    """Issue #43: 100k users × 2 items was still building after 420 s without a word."""
    from persalign.data.preflamp import mining_notice

    assert mining_notice([(list(range(1000)), list(range(2000)))]) is None  # 2e6 pairs: seconds
    items = list(range(200_000))  # 100k users × 2 items: every item against the train users' items
    notice = mining_notice([(items, items[:100_000])])
    assert notice.startswith("Pref-LaMP: mining hard negatives compares 2.00e+10 item pairs: about 10 min on 2 cores")
