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

from persalign.core.config import SplitConfig
from persalign.core.errors import DataError
from persalign.core.files import warn
from persalign.core.records import Comparison, Completion, PreferenceDataset, UserItem
from persalign.data.mining import BLOCK_ELEMENTS, mine_negatives
from persalign.data.split import UserSplit, make_split, split_signature
from persalign.data.writing import UserWriting

PAIRS_PER_SECOND = 3.4e7  # measured: 1.16e9 item pairs in 33.8 s, 1024 dimensions, 2 cores (bench_mining.py)
BYTES_PER_SIMILARITY = 10  # a block's float32 values, their partitioned copy and two masks (bench_mining.py)


def mining_notice(pools: list[tuple[list[int], list[int]]]) -> str | None:
    """A line saying up front what mining will cost when it takes more than a minute (every item is compared
    with every pool item of another user: quadratic in the number of items)."""
    pairs = sum(len(rows) * len(pool) for rows, pool in pools if rows)
    seconds = pairs / PAIRS_PER_SECOND
    if seconds < 60:
        return None
    gib = BLOCK_ELEMENTS * BYTES_PER_SIMILARITY / 2**30
    return (f"Pref-LaMP: mining hard negatives compares {pairs:.2e} item pairs: about {seconds / 60:.0f} min on 2 "
            f"cores (measured rate {PAIRS_PER_SECOND:.1e}/s), about {gib:.1f} GiB at a time; data.max_users caps it")


def hard_negative_indices(embeddings: np.ndarray, users: list[str], top_k: int,
                          seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Negatives for every row from every other user's items (one pool)."""
    user_ids = np.unique(np.array(users), return_inverse=True)[1]
    if user_ids.max(initial=0) < 1:
        raise ValueError("hard negatives need at least two users")
    everything = np.arange(len(users))
    return mine_negatives(embeddings, user_ids, everything, everything, top_k, np.random.default_rng(seed))


def deduplicate(writing: UserWriting) -> UserWriting:
    """Keep the first item of every output text, across all users (identical items included).

    An identical headline under two users, or twice under one, would otherwise
    let a query item's own text reach training or the support set (as a train
    user's chosen output, or as a mined negative). The same INPUT under several
    users with different outputs stays: it is one article headlined by several
    authors (LaMP-4's shape, and the built-in demo's), and says nothing of how
    one author writes it; the split keeps each user's copies of a prompt together.
    """
    seen, kept = set(), []
    for item in writing.items:
        text = item.output.strip()
        if text in seen:
            continue
        seen.add(text)
        kept.append(item)
    notes = dict(writing.notes)
    # added to what an earlier pass dropped: the data is de-duplicated twice (build, then pair construction),
    # and the second pass, finding nothing, reported 0 after 30 repeats were dropped
    notes["duplicate_outputs_dropped"] = notes.get("duplicate_outputs_dropped", 0) + len(writing.items) - len(kept)
    return UserWriting(writing.name, writing.task, writing.source, kept, notes)


def negative_pools(split: UserSplit, items: list[UserItem]) -> list[tuple[list[int], list[int]]]:
    """(rows, pool) per split role: where each pair's rejected output may come from.

    Train and held-out pairs (and items in no set): train users' items only.
    Support pairs: train users' items (training data, never an evaluation text).
    Query pairs: other adaptation users' non-support items, so no query text
    (reference, input or negative) ever appears in a train, held-out or support pair.
    With a single adaptation user, its query negatives come from train users.
    """
    index_of = {item.id: row for row, item in enumerate(items)}
    rows_of = lambda sets: [index_of[i] for ids in sets.values() for i in ids]  # noqa: E731
    train_items = rows_of(split.train) + rows_of(split.heldout)
    support, query = rows_of(split.support), rows_of(split.query)
    placed = set(train_items) | set(support) | set(query)
    unplaced = [row for row in range(len(items)) if row not in placed]
    if len(split.adapt_users) < 2:
        return [(train_items + unplaced, train_items), (support + query, train_items)]
    adapt_users, support_rows = set(split.adapt_users), set(support)
    adapt_rest = [row for row, item in enumerate(items) if item.user in adapt_users and row not in support_rows]
    return [(train_items + unplaced, train_items), (support, train_items), (query, adapt_rest)]


def build_pref_lamp(writing: UserWriting, embedder, split_config: SplitConfig, top_k: int = 10,
                    seed: int = 0) -> PreferenceDataset:
    """Turn per-user (input, output) items into a preference data set (see module doc).

    Items are de-duplicated first; the user split (`make_split` with
    `split_config`, which depends only on ids, users and prompts) is fixed
    before any negative is mined, and each role mines from its own pool
    (`negative_pools`), so a later `make_split` of the result gives the same split. The split is a
    required argument and is recorded in the notes: `make_split` refuses any other split of the result,
    whose query items could have been mined as negatives under this one.
    """
    writing = deduplicate(writing)
    items = [item for item in writing.items if item.input]
    if len({item.user for item in items}) < 2:
        raise DataError(writing.source, "Pref-LaMP needs items from at least two users")
    provisional = [Comparison(item.id, item.user, item.input, item.output, "") for item in items]
    split = make_split(PreferenceDataset(writing.name, writing.task, provisional), split_config)
    pools = negative_pools(split, items)
    notice = mining_notice(pools)
    if notice:  # before the embedding, which takes its own while at that size
        warn(notice)
    embeddings = embedder.encode([item.input for item in items]).astype(np.float32)
    user_ids = np.unique(np.array([item.user for item in items]), return_inverse=True)[1]
    rng, rejected = np.random.default_rng(seed), {}
    for rows, pool in pools:
        if not rows:
            continue
        try:
            picks, _ = mine_negatives(embeddings, user_ids, np.array(rows), np.array(pool), top_k, rng)
        except ValueError as error:
            raise DataError(writing.source, f"Pref-LaMP negatives: {error}: {len(split.train_users)} train and "
                            f"{len(split.adapt_users)} adaptation users; the negatives need at least 2 users with "
                            "items in the train role (and intervals 8 adaptation users): add users or change "
                            "split.adapt_fraction") from None
        rejected.update({row: items[pick].output for row, pick in zip(rows, picks)})
    comparisons = [Comparison(item.id, item.user, item.input, item.output, rejected[row])
                   for row, item in enumerate(items)]
    completions = [Completion(item.id, item.user, item.input, item.output) for item in items]
    profiles: dict[str, list[UserItem]] = defaultdict(list)
    for item in writing.items:
        profiles[item.user].append(item)
    notes = dict(writing.notes)
    notes.update(pairs=len(comparisons), negatives_top_k=top_k, negatives_split=split_signature(split_config),
                 embedder=getattr(embedder, "key", "?"),
                 negatives="train/held-out/support: train users' items; query: other adaptation users' query items")
    return PreferenceDataset(writing.name, writing.task, comparisons, completions, dict(profiles), notes)
