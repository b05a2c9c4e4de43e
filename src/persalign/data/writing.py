"""Per-user writing: the (input, output) items loaders return before Pref-LaMP.

Also the generic per-user completions JSONL loader (`user, input, output`,
optional `id`, `date`), which the built-in demo reuses.

    persalign data summary configs/news_category.yaml
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from persalign.core.config import DataConfig
from persalign.core.errors import DataError
from persalign.core.records import UserItem
from persalign.core.registry import register_dataset
from persalign.data.jsonio import UniqueIds, optional_text, read_jsonl, record_id, require_text


@dataclass
class UserWriting:
    """What a loader of per-user writing returns: items plus how they were read."""

    name: str
    task: str
    source: str
    items: list[UserItem]
    notes: dict[str, int | str] = field(default_factory=dict)


def keep_active_users(writing: UserWriting, config: DataConfig) -> UserWriting:
    """Drop users with fewer than `min_items_per_user` items; keep the first `max_users` of the rest (in data
    order); cap prolific users.

    Items with an empty input (style-only history, e.g. LaMP-7 tweets) count
    towards the profile but not towards the minimum, since they yield no pair.
    """
    counts = Counter(item.user for item in writing.items if item.input)
    keep = {user for user, n in counts.items() if n >= config.min_items_per_user}
    if not keep:
        best = max(counts.values(), default=0)
        dropped = writing.notes.get("duplicate_outputs_dropped", 0)
        why = f" after {dropped} items repeating an earlier output were dropped" if dropped else ""
        raise DataError(
            writing.source,
            f"no user has at least min_items_per_user={config.min_items_per_user} items{why} "
            f"(the most any user has is {best}); lower data.min_items_per_user",
        )
    qualifying = len(keep)
    if config.max_users:
        keep = set([user for user in dict.fromkeys(item.user for item in writing.items) if user in keep]
                   [: config.max_users])
    items = [item for item in writing.items if item.user in keep]
    if config.max_items_per_user:
        by_user: dict[str, list[UserItem]] = {}
        for item in items:
            by_user.setdefault(item.user, []).append(item)
        items = []
        for user in sorted(by_user):
            newest_first = sorted(by_user[user], key=lambda it: (it.date or "", it.id), reverse=True)
            items.extend(sorted(newest_first[: config.max_items_per_user], key=lambda it: it.id))
    notes = dict(writing.notes)
    notes.update(users_total=len(counts), users_kept=len(keep), users_below_minimum=len(counts) - qualifying)
    if len(keep) < qualifying:
        notes.update(users_beyond_max_users=qualifying - len(keep))
    return UserWriting(writing.name, writing.task, writing.source, items, notes)


def load_completions_jsonl(path: str | Path, name: str, task: str) -> UserWriting:
    """Generic schema: one `{"user", "input", "output", "id"?, "date"?}` a line."""
    items, seen = [], UniqueIds(path)
    for lineno, record in read_jsonl(path):
        where = f"line {lineno}"
        user = require_text(record, "user", path, where)
        item_id = record_id(record, "id", path, where) or f"{name}:{lineno}"
        seen.add(item_id, where)
        items.append(
            UserItem(
                id=item_id,
                user=user,
                input=require_text(record, "input", path, where),
                output=require_text(record, "output", path, where),
                date=optional_text(record, "date", path, where),
            )
        )
    if not items:
        raise DataError(path, "the file holds no records")
    return UserWriting(name, task, str(path), items, {"records": len(items)})


@register_dataset("completions_jsonl")
def load_generic_completions(config: DataConfig) -> UserWriting:
    """Your own per-user writing: JSONL with `user, input, output` (+ `id`, `date`)."""
    if not config.path:
        raise DataError("<config>", "data.path must name the JSONL file for completions_jsonl")
    return load_completions_jsonl(config.path, "completions_jsonl", config.task)
