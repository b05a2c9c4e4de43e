"""User split (paper §3.1): train users vs adaptation users; support vs query.

Train users learn shared structure (their pairs split into `train` and a small
`heldout` set for validation and λ selection). Each adaptation user's pairs
split into `support` (adaptation: RM few-shot fit, ICL demonstrations) and
`query` (evaluation). Seeded and deterministic; no item is in two sets.

Splits cut GROUPS, not single pairs: a group is every pair with the same
prompt (and conversation history): the comparisons of one TL;DR post, one
Pref-LaMP item; for conversations (PRISM), every turn of the conversation. So "chosen vs A"
cannot sit in support while "chosen vs B" is in query, and no held-out
prompt (early stopping, λ choice) is also a training prompt. Train vs
held-out is cut over the train users' groups together; support vs query per
adaptation user.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass

import numpy as np

from persalign.core.config import SplitConfig
from persalign.core.errors import DataError
from persalign.core.records import PreferenceDataset


@dataclass
class UserSplit:
    train_users: list[str]
    adapt_users: list[str]
    train: dict[str, list[str]]
    heldout: dict[str, list[str]]
    support: dict[str, list[str]]
    query: dict[str, list[str]]
    query_seen_in_training: int = 0  # query pairs dropped: the same (prompt, chosen, rejected) is in another set

    def query_ids(self) -> list[str]:
        return [i for user in self.adapt_users for i in self.query[user]]

    def sets(self) -> dict[str, dict[str, list[str]]]:
        return {"train": self.train, "heldout": self.heldout, "support": self.support, "query": self.query}


def group_key(comparison) -> tuple:
    """Pairs with the same key share a prompt and must stay in one set."""
    return comparison.prompt, comparison.history


def group_keys(comparisons) -> dict[str, tuple]:
    """Each pair's group: its prompt and history; pairs of conversations (`thread`) are grouped by thread.

    Threads are merged where they share any text that a later turn shows as context (a prompt, a chosen
    answer, a history entry), so no query turn's prompt or chosen answer is ever context elsewhere.
    """
    keys = {c.id: group_key(c) for c in comparisons}
    threaded = [c for c in comparisons if c.thread is not None]
    parent: dict[tuple, tuple] = {}

    def root(node: tuple) -> tuple:
        while parent.setdefault(node, node) != node:
            parent[node] = parent[parent[node]]
            node = parent[node]
        return node

    for c in threaded:
        texts = [("text", c.prompt), ("text", c.chosen)] + [("text", text) for _, text in c.history]
        for text in texts:
            a, b = root(("thread", c.thread)), root(text)
            if a != b:
                parent[max(a, b)] = min(a, b)  # the smaller node leads: groups do not depend on data order
    for c in threaded:
        keys[c.id] = ("thread", root(("thread", c.thread)))
    return keys


def _cut(ids: list[str], fraction: float, rng: np.random.Generator,
         groups: dict[str, tuple]) -> tuple[list[str], list[str]]:
    """Split `ids` into (first, rest) by whole groups; `fraction` of the groups go first."""
    keys = sorted(set(groups[i] for i in ids), key=repr)
    shuffled = [keys[i] for i in rng.permutation(len(keys))]
    n_first = min(max(1, round(fraction * len(keys))), len(keys) - 1) if len(keys) > 1 else len(keys)
    first = set(shuffled[:n_first])
    return sorted(i for i in ids if groups[i] in first), sorted(i for i in ids if groups[i] not in first)


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


def _train_heldout(by_user, train_users, fraction: float, rng, groups) -> tuple[dict, dict]:
    """Held-out groups cut over all train users together (a prompt never in both)."""
    ids = [i for user in train_users for i in by_user[user]]
    heldout_ids = set(_cut(ids, fraction, rng, groups)[0]) if fraction > 0 and len(ids) > 1 else set()
    train = {u: [i for i in by_user[u] if i not in heldout_ids] for u in train_users}
    heldout = {u: [i for i in by_user[u] if i in heldout_ids] for u in train_users}
    return train, heldout


def split_signature(config: SplitConfig) -> str:
    return json.dumps(asdict(config), sort_keys=True)


def make_split(dataset: PreferenceDataset, config: SplitConfig) -> UserSplit:
    mined_under = dataset.notes.get("negatives_split")
    if mined_under is not None and mined_under != split_signature(config):
        raise DataError(dataset.name, f"its negatives were mined under the split {mined_under}; splitting it with "
                                      f"{split_signature(config)} could put query texts among training negatives "
                                      "(build the data set with the split you evaluate with)")
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
    groups = group_keys(dataset.comparisons)
    train, heldout = _train_heldout(by_user, train_users, config.heldout_fraction, rng, groups)
    support, query = {}, {}
    for user in adapt_users:
        if len({groups[i] for i in by_user[user]}) < 2:
            raise DataError(dataset.name, f"adaptation user {user!r} has {len(by_user[user])} pair(s) on fewer than "
                                          "2 prompts; needs 2+ prompts (support and query)")
        support[user], query[user] = _cut(by_user[user], config.support_fraction, rng, groups)
    query, dropped = _without_seen_pairs(dataset, query, [train, heldout, support])
    if config.max_query_per_user:
        query = {user: ids[: config.max_query_per_user] for user, ids in query.items()}
    return UserSplit(train_users, adapt_users, train, heldout, support, query, dropped)


def _without_seen_pairs(dataset, query: dict, other_sets: list[dict]) -> tuple[dict, int]:
    """Query pairs whose (prompt, chosen, rejected) also sits in a train, held-out or support set (users who
    hold the same pairs) would be scored on what was trained on: dropped and counted, or refused if none is left."""
    by_id = {c.id: c for c in dataset.comparisons}
    triple = lambda i: (by_id[i].prompt, by_id[i].chosen, by_id[i].rejected)  # noqa: E731
    seen = {triple(i) for sets in other_sets for ids in sets.values() for i in ids}
    kept = {user: [i for i in ids if triple(i) not in seen] for user, ids in query.items()}
    dropped = sum(len(ids) for ids in query.values()) - sum(len(ids) for ids in kept.values())
    if dropped and not any(kept.values()):
        raise DataError(dataset.name, f"every one of its {dropped} query pairs also appears (same prompt, chosen and "
                                      "rejected) among the training, held-out or support pairs: the users hold the "
                                      "same pairs, so nothing can be evaluated on unseen data")
    return kept, dropped
