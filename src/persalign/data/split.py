"""User split (paper §3.1): train users vs adaptation users; support vs query.

Train users learn shared structure (their pairs split into `train` and a small
`heldout` set for validation and λ selection). Each adaptation user's pairs
split into `support` (adaptation: RM few-shot fit, ICL demonstrations) and
`query` (evaluation). Seeded and deterministic; no item is in two sets.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from persalign.config import SplitConfig
from persalign.errors import DataError
from persalign.records import PreferenceDataset


@dataclass
class UserSplit:
    train_users: list[str]
    adapt_users: list[str]
    train: dict[str, list[str]]
    heldout: dict[str, list[str]]
    support: dict[str, list[str]]
    query: dict[str, list[str]]

    def query_ids(self) -> list[str]:
        return [i for user in self.adapt_users for i in self.query[user]]

    def sets(self) -> dict[str, dict[str, list[str]]]:
        return {"train": self.train, "heldout": self.heldout, "support": self.support, "query": self.query}


def _cut(ids: list[str], fraction: float, rng: np.random.Generator) -> tuple[list[str], list[str]]:
    shuffled = [ids[i] for i in rng.permutation(len(ids))]
    n_first = min(max(1, round(fraction * len(ids))), len(ids) - 1) if len(ids) > 1 else len(ids)
    return sorted(shuffled[:n_first]), sorted(shuffled[n_first:])


def _most_active_split(by_user, config: SplitConfig, rng, name):
    """The paper's TL;DR shape: top-N users by pair count train; others with enough pairs adapt."""
    ranked = sorted(by_user, key=lambda u: (-len(by_user[u]), u))
    train_users = sorted(ranked[: config.train_top_users])
    need = config.adapt_pairs_per_user or 2
    adapt_users = sorted(u for u in ranked[config.train_top_users:] if len(by_user[u]) >= need)
    if not adapt_users:
        raise DataError(name, f"no user outside the top {config.train_top_users} has {need}+ pairs to adapt on")
    by_user = dict(by_user)
    if config.adapt_pairs_per_user:
        for user in adapt_users:
            keep = rng.permutation(len(by_user[user]))[: config.adapt_pairs_per_user]
            by_user[user] = sorted(by_user[user][i] for i in keep)
    return train_users, adapt_users, by_user


def make_split(dataset: PreferenceDataset, config: SplitConfig) -> UserSplit:
    by_user = {u: sorted(c.id for c in cs) for u, cs in dataset.comparisons_by_user().items()}
    users = sorted(by_user)
    if len(users) < 2:
        raise DataError(dataset.name, f"a user split needs at least 2 users with pairs, found {len(users)}")
    if not 0 < config.adapt_fraction < 1 or not 0 < config.support_fraction < 1:
        raise DataError(dataset.name, "split.adapt_fraction and split.support_fraction must lie in (0, 1)")
    rng = np.random.default_rng(config.seed)
    if config.train_top_users:
        train_users, adapt_users, by_user = _most_active_split(by_user, config, rng, dataset.name)
    else:
        order = [users[i] for i in rng.permutation(len(users))]
        n_adapt = min(max(1, round(config.adapt_fraction * len(users))), len(users) - 1)
        adapt_users, train_users = sorted(order[:n_adapt]), sorted(order[n_adapt:])
    train, heldout, support, query = {}, {}, {}, {}
    for user in train_users:
        if config.heldout_fraction > 0 and len(by_user[user]) > 1:
            heldout[user], train[user] = _cut(by_user[user], config.heldout_fraction, rng)
        else:
            heldout[user], train[user] = [], list(by_user[user])
    for user in adapt_users:
        if len(by_user[user]) < 2:
            raise DataError(dataset.name, f"adaptation user {user!r} has {len(by_user[user])} pair(s); needs 2+")
        support[user], query[user] = _cut(by_user[user], config.support_fraction, rng)
        if config.max_query_per_user:
            query[user] = query[user][: config.max_query_per_user]
    return UserSplit(train_users, adapt_users, train, heldout, support, query)
