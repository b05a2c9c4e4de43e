"""PRISM alignment (Kirk et al. 2024), real and sparse.

`data.path` is the folder holding `conversations.jsonl` and `survey.jsonl`
(or `hf:HannahRoseKirk/prism-alignment`). In each rated turn the chosen model
response (`if_chosen`) is paired against every other response of that turn;
the prompt is the user's message of that turn and the history the
conversation so far (earlier user messages and the chosen responses),
rendered with the policy's chat template. Users come from the survey; users
without any qualifying turn are dropped and counted; turns with a single
response give no pair.

    persalign data summary configs/prism.yaml
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

from persalign.config import DataConfig
from persalign.data.hub import iter_records
from persalign.errors import DataError
from persalign.records import Comparison, PreferenceDataset
from persalign.registry import register_dataset


def _sources(path: str) -> tuple[str, str]:
    if path.startswith("hf:"):
        name = path[3:].split("@")[0].split(":")[0]
        return f"hf:{name}:conversations", f"hf:{name}:survey"
    folder = Path(path).expanduser()
    return str(folder / "conversations.jsonl"), str(folder / "survey.jsonl")


def conversation_pairs(conversation: dict, source: str, where: str) -> list[Comparison]:
    history_turns = conversation.get("conversation_history")
    if not isinstance(history_turns, list):
        raise DataError(source, "field 'conversation_history' must be a list", where)
    by_turn: dict[int, list[dict]] = defaultdict(list)
    for utterance in history_turns:
        by_turn[int(utterance.get("turn", 0))].append(utterance)
    user, conv_id = str(conversation.get("user_id", "")), str(conversation.get("conversation_id", ""))
    history: list[tuple[str, str]] = []
    pairs = []
    for turn in sorted(by_turn):
        user_msgs = [u.get("content", "") for u in by_turn[turn] if u.get("role") == "user"]
        models = [u for u in by_turn[turn] if u.get("role") == "model"]
        chosen = [m for m in models if m.get("if_chosen")]
        message = user_msgs[0] if user_msgs else ""
        if chosen and message:
            for other in models:
                if other is chosen[0] or not other.get("content"):
                    continue
                pairs.append(Comparison(f"{conv_id}/{turn}/{other.get('within_turn_id', len(pairs))}", user, message,
                                        chosen[0].get("content", ""), other["content"], tuple(history)))
            history += [("user", message), ("assistant", chosen[0].get("content", ""))]
    return pairs


@register_dataset("prism")
def load_prism(config: DataConfig) -> PreferenceDataset:
    """PRISM: chosen vs each other response per rated turn; context = the conversation so far."""
    if not config.path:
        raise DataError("<config>", "data.path must name the PRISM folder (conversations.jsonl, survey.jsonl)")
    conversations_path, survey_path = _sources(config.path)
    survey_users = {str(r.get("user_id")) for _, r in iter_records(survey_path) if r.get("user_id") is not None}
    comparisons, unknown = [], 0
    for where, conversation in iter_records(conversations_path):
        if str(conversation.get("user_id")) not in survey_users:
            unknown += 1
            continue
        comparisons += conversation_pairs(conversation, conversations_path, where)
    users_with_pairs = {c.user for c in comparisons}
    if not comparisons:
        raise DataError(conversations_path, "no rated turn with two or more responses was found")
    notes = {"pairs": len(comparisons), "survey_users": len(survey_users), "users": len(users_with_pairs),
             "users_without_pairs": len(survey_users - users_with_pairs),
             "conversations_of_unknown_users": unknown}
    return PreferenceDataset("prism", config.task or "chat", comparisons, notes=notes)
