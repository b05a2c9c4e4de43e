"""What every decoder sees: the evaluation context, and the demo pool of a user.

A decoder decides, for each query example, which demonstrations go into the
prompt (none for zero-shot) and how tokens are chosen (greedy for the
reward-free baselines). The user's demonstration pool is their support items
plus any style-only history; never a query item, never another user's item.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

import numpy as np

from persalign.data.split import UserSplit
from persalign.records import PreferenceDataset, UserItem


@dataclass
class EvalContext:
    dataset: PreferenceDataset
    split: UserSplit
    embedder: object | None = None  # CachedEmbedder, for retrieval
    items: dict[str, UserItem] = field(default_factory=dict)

    def __post_init__(self):
        if not self.items:
            self.items = self.dataset.item_by_id()

    def demo_pool(self, user: str) -> list[UserItem]:
        support = [self.items[i] for i in self.split.support.get(user, [])]
        style_only = [item for item in self.dataset.profiles.get(user, []) if not item.input]
        return support + style_only


def example_rng(seed: int, example_id: str) -> np.random.Generator:
    """An RNG that depends only on (seed, example): results do not depend on batching or order."""
    digest = int(hashlib.sha1(example_id.encode("utf-8")).hexdigest()[:12], 16)
    return np.random.default_rng([seed, digest])
