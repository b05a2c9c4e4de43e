"""Preference data sets that come as pairs: TL;DR, Personalized RewardBench, generic JSONL.

- `tldr` (Stiennon et al. 2020, summarize_from_feedback "comparisons"): user =
  `worker`; prompt = the post with its subreddit and title; chosen =
  `summaries[choice]`. Local JSONL or `hf:openai/summarize_from_feedback`.
- `personalized_rewardbench`: question, the user's profile (history items,
  kept for ICL/RAG), chosen, rejected. The rubric and narrative are never
  read. A user is identified by their profile (the same profile, the same user);
  a record with an empty profile belongs to nobody identifiable: it is dropped
  and counted (`records_with_empty_profile_dropped`), never merged into one
  phantom user.
- `preferences_jsonl`: your own pairs, one `{"user", "prompt", "chosen",
  "rejected", "reference"?, "id"?}` a line; `reference` is the user's own text.
  A pair whose chosen and rejected texts are identical carries no preference:
  it is dropped and counted (`pairs_with_chosen_equal_to_rejected_dropped`).

    persalign data summary configs/tldr.yaml
"""

from __future__ import annotations

import hashlib
from collections import defaultdict

from persalign.core.config import DataConfig
from persalign.core.errors import DataError
from persalign.core.records import Comparison, Completion, PreferenceDataset, UserItem
from persalign.core.registry import register_dataset
from persalign.data.hub import iter_records
from persalign.data.jsonio import UniqueIds, record_id, require_text


def _need_path(config: DataConfig, what: str) -> str:
    if not config.path:
        raise DataError("<config>", f"data.path must name {what}")
    return config.path


@register_dataset("tldr")
def load_tldr(config: DataConfig) -> PreferenceDataset:
    """Reddit TL;DR comparisons per annotator (`worker`); JSONL or hf:openai/summarize_from_feedback."""
    path = _need_path(config, "the TL;DR comparisons JSONL (or hf:openai/summarize_from_feedback)")
    comparisons, seen = [], UniqueIds(path, "comparison")
    for where, record in iter_records(path, default_config="comparisons"):
        info, summaries = record.get("info"), record.get("summaries")
        if not isinstance(info, dict):
            raise DataError(path, "field 'info' must be an object", where)
        if not isinstance(summaries, list) or len(summaries) != 2:
            raise DataError(path, "field 'summaries' must hold exactly two summaries", where)
        choice = record.get("choice")
        if choice not in (0, 1):
            raise DataError(path, f"field 'choice' must be 0 or 1, got {choice!r}", where)
        texts = [require_text(s, "text", path, f"{where}, summaries[{i}]") for i, s in enumerate(summaries)]
        post = require_text(info, "post", path, where)
        prompt = f"SUBREDDIT: r/{info.get('subreddit') or ''}\nTITLE: {info.get('title') or ''}\nPOST: {post}"
        worker = require_text(record, "worker", path, where)
        post_id = record_id(info, "id", path, f"{where}, info") or ""
        pair_key = hashlib.sha1("\0".join(sorted(texts)).encode("utf-8")).hexdigest()[:8]
        seen.add(f"worker {worker}, post {post_id}, summaries {pair_key}", where)
        comparisons.append(Comparison(f"tldr:{post_id}:{where}", worker, prompt, texts[choice], texts[1 - choice]))
    if not comparisons:
        raise DataError(path, "no comparisons found")
    return PreferenceDataset("tldr", "summary", comparisons, notes={"pairs": len(comparisons)})


def profile_user(profile: list) -> str:
    """A stable user id from the ids of the profile items."""
    key = "|".join(sorted(str(item.get("id", item.get("text", ""))) for item in profile))
    return "user-" + hashlib.sha1(key.encode("utf-8")).hexdigest()[:10]


@register_dataset("personalized_rewardbench")
def load_personalized_rewardbench(config: DataConfig) -> PreferenceDataset:
    """Personalized RewardBench: question + user profile, chosen/rejected by the user's rubric (never shown)."""
    path = _need_path(config, "the Personalized RewardBench JSONL")
    comparisons, profiles, seen, anonymous, rubrics = [], defaultdict(dict), UniqueIds(path), 0, {}
    for where, record in iter_records(path):
        profile = record.get("profile")
        if not isinstance(profile, list):
            raise DataError(path, "field 'profile' must be a list", where)
        if not profile:  # users are identified by their profile: an empty one would merge strangers
            anonymous += 1
            continue
        user = profile_user(profile)
        for j, item in enumerate(profile):
            if not isinstance(item, dict):
                raise DataError(path, f"profile[{j}] must be an object", where)
            text = require_text(item, "text", path, f"{where}, profile[{j}]")
            item_id = f"{user}/{record_id(item, 'id', path, f'{where}, profile[{j}]') or j}"
            profiles[user][item_id] = UserItem(item_id, user, "", text)
        pair_id = record_id(record, "id", path, where) or f"prb:{where}"
        seen.add(pair_id, where)
        rubric = rubric_text(record.get("rubric_aspects"))
        if rubric:
            rubrics[pair_id] = rubric
        comparisons.append(Comparison(
            pair_id, user, require_text(record, "question", path, where),
            require_text(record, "chosen", path, where), require_text(record, "rejected", path, where)))
    if not comparisons:
        raise DataError(path, "no examples found")
    return PreferenceDataset("personalized_rewardbench", "chat", comparisons,
                             profiles={u: list(items.values()) for u, items in profiles.items()},
                             notes={"pairs": len(comparisons), "users": len({c.user for c in comparisons}),
                                    "users_with_profile": len(profiles),
                                    "records_with_empty_profile_dropped": anonymous},
                             rubrics=rubrics)


def rubric_text(aspects) -> str:
    """The user's rubric as the judge reads it: aspects one a line (text, or each mapping's values)."""
    if isinstance(aspects, str):
        return aspects.strip()
    if not isinstance(aspects, list):
        return ""
    lines = [" — ".join(str(v) for v in a.values()) if isinstance(a, dict) else str(a) for a in aspects]
    return "\n".join(f"- {line}" for line in lines if line.strip())


@register_dataset("preferences_jsonl")
def load_preferences_jsonl(config: DataConfig) -> PreferenceDataset:
    """Your own pairs: JSONL with `user, prompt, chosen, rejected` (+ `reference`, `id`)."""
    path = _need_path(config, "a preferences JSONL file")
    comparisons, completions, seen, identical = [], [], UniqueIds(path), 0
    for where, record in iter_records(path):
        pair_id = record_id(record, "id", path, where) or f"pref:{where}"
        seen.add(pair_id, where)
        user = require_text(record, "user", path, where)
        prompt = require_text(record, "prompt", path, where)
        chosen, rejected = require_text(record, "chosen", path, where), require_text(record, "rejected", path, where)
        if chosen == rejected:  # no preference to learn or rank: dropped, counted in the data summary
            identical += 1
            continue
        comparisons.append(Comparison(pair_id, user, prompt, chosen, rejected))
        if record.get("reference") is not None:
            completions.append(Completion(pair_id, user, prompt, require_text(record, "reference", path, where)))
    if not comparisons:
        raise DataError(path, f"every one of its {identical} pairs has chosen == rejected: no preference to learn"
                        if identical else "the file holds no records")
    return PreferenceDataset("preferences_jsonl", config.task, comparisons, completions,
                             notes={"pairs": len(comparisons), "with_reference": len(completions),
                                    "pairs_with_chosen_equal_to_rejected_dropped": identical})
