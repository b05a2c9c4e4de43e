"""Pref-LaMP: preferences with ground-truth user completions (paper §5).

For every item a user wrote: embed its input, retrieve the top-k most similar
inputs written by *other* users, sample one of them (seeded), and pair the
user's own output (chosen) against that other user's output (rejected). The
rejection is topically relevant but written by someone else: a human-written
hard negative, not an LLM artefact. The user's own output is also kept as the
ground-truth completion for generation metrics (Eq. 8).

    persalign data summary configs/news_category.yaml
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np

from persalign.data.writing import UserWriting
from persalign.errors import DataError
from persalign.records import Comparison, Completion, PreferenceDataset, UserItem


def hard_negative_indices(
    embeddings: np.ndarray, users: list[str], top_k: int, seed: int, chunk: int = 1024
) -> tuple[np.ndarray, np.ndarray]:
    """For each row, (index of the sampled negative, indices of its top-k other-user neighbours).

    Neighbours are ranked by cosine similarity (embeddings are L2-normalised);
    ties are broken by index, so the result is fully determined by the seed.
    """
    n = len(users)
    user_ids = np.unique(np.array(users), return_inverse=True)[1]
    counts = np.bincount(user_ids)
    if len(counts) < 2:
        raise ValueError("hard negatives need at least two users")
    rng = np.random.default_rng(seed)
    k = max(1, min(top_k, n - int(counts.max())))  # every row has k other-user items
    neighbours = np.zeros((n, k), dtype=np.int64)
    for start in range(0, n, chunk):
        stop = min(start + chunk, n)
        sims = embeddings[start:stop] @ embeddings.T
        sims[user_ids[start:stop, None] == user_ids[None, :]] = -np.inf
        neighbours[start:stop] = np.argsort(-sims, axis=1, kind="stable")[:, :k]
    picks = neighbours[np.arange(n), rng.integers(0, k, size=n)]
    return picks, neighbours


def build_pref_lamp(writing: UserWriting, embedder, top_k: int = 10, seed: int = 0) -> PreferenceDataset:
    """Turn per-user (input, output) items into a preference data set (see module doc)."""
    pair_items = [item for item in writing.items if item.input]
    if len({item.user for item in pair_items}) < 2:
        raise DataError(writing.source, "Pref-LaMP needs items from at least two users")
    embeddings = embedder.encode([item.input for item in pair_items]).astype(np.float32)
    picks, neighbours = hard_negative_indices(embeddings, [i.user for i in pair_items], top_k, seed)
    comparisons, completions = [], []
    for row, item in enumerate(pair_items):
        negative = pair_items[picks[row]]
        if negative.output == item.output:  # another user wrote the very same text: take the next one
            alternatives = [pair_items[j] for j in neighbours[row] if pair_items[j].output != item.output]
            if not alternatives:
                continue
            negative = alternatives[0]
        comparisons.append(Comparison(item.id, item.user, item.input, item.output, negative.output))
        completions.append(Completion(item.id, item.user, item.input, item.output))
    profiles: dict[str, list[UserItem]] = defaultdict(list)
    for item in writing.items:
        profiles[item.user].append(item)
    notes = dict(writing.notes)
    notes.update(pairs=len(comparisons), negatives_top_k=top_k, embedder=getattr(embedder, "key", "?"))
    return PreferenceDataset(writing.name, writing.task, comparisons, completions, dict(profiles), notes)
