"""Typed records: what a user wrote, a preference pair, a completion, a data set.

`UserItem` is one (input, output) that a user wrote (a headline for an article,
a title for an abstract). The Pref-LaMP builder turns a user's items into
`Comparison`s (their own output preferred over another user's) and
`Completion`s (their own output as the ground truth for generation).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field


@dataclass(frozen=True)
class UserItem:
    id: str
    user: str
    input: str
    output: str
    date: str | None = None


@dataclass(frozen=True)
class Comparison:
    """A preference. `history` holds earlier conversation turns as (role, text) pairs (PRISM); `thread`
    names the conversation a turn belongs to, so a split keeps its turns together (data/split.py)."""

    id: str
    user: str
    prompt: str
    chosen: str
    rejected: str
    history: tuple[tuple[str, str], ...] = ()
    thread: str | None = None


@dataclass(frozen=True)
class Completion:
    id: str
    user: str
    prompt: str
    reference: str


@dataclass
class PreferenceDataset:
    """Preferences, user-written completions and per-user profiles of one data set.

    `profiles[user]` is the user's writing history (ICL demonstrations and
    retrieval draw from it, always restricted to the user's support items).
    Comparisons and completions that stem from the same item share its id.
    """

    name: str
    task: str
    comparisons: list[Comparison]
    completions: list[Completion] = field(default_factory=list)
    profiles: dict[str, list[UserItem]] = field(default_factory=dict)
    notes: dict[str, int | str] = field(default_factory=dict)
    rubrics: dict[str, str] = field(default_factory=dict)  # comparison id -> the user's rubric: the judge's only

    def users(self) -> list[str]:
        return sorted({c.user for c in self.comparisons})

    def comparisons_by_user(self) -> dict[str, list[Comparison]]:
        grouped: dict[str, list[Comparison]] = defaultdict(list)
        for comparison in self.comparisons:
            grouped[comparison.user].append(comparison)
        return dict(grouped)

    def completion_by_id(self) -> dict[str, Completion]:
        return {c.id: c for c in self.completions}

    def item_by_id(self) -> dict[str, UserItem]:
        return {item.id: item for items in self.profiles.values() for item in items}
