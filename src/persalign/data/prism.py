"""PRISM alignment (Kirk et al. 2024), real and sparse.

`data.path` is the folder holding `conversations.jsonl` and `survey.jsonl`
(or `hf:HannahRoseKirk/prism-alignment`). In each rated turn the chosen model
response (`if_chosen`) is paired against every other response of that turn;
the prompt is the user's message of that turn and the history the
conversation so far (earlier user messages and the chosen responses),
rendered with the policy's chat template. Every pair names its conversation
(`thread`), so the split keeps a conversation's turns together: a later turn's
history holds the earlier turns' prompts and chosen answers. Users come from the survey; users
without any qualifying turn are dropped and counted; turns with a single
response give no pair.

    persalign data summary configs/prism.yaml
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

from persalign.core.config import DataConfig
from persalign.core.errors import DataError
from persalign.core.records import Comparison, PreferenceDataset
from persalign.core.registry import register_dataset
from persalign.data.hub import iter_records


def _sources(path: str) -> tuple[str, str]:
    if path.startswith("hf:"):
        name = path[3:].split("@")[0].split(":")[0]
        return f"hf:{name}:conversations", f"hf:{name}:survey"
    folder = Path(path).expanduser()
    return str(folder / "conversations.jsonl"), str(folder / "survey.jsonl")


def _utterances(conversation: dict, source: str, where: str) -> dict[int, list[dict]]:
    """The conversation's utterances grouped by turn, every field type-checked."""
    history_turns = conversation.get("conversation_history")
    if not isinstance(history_turns, list):
        raise DataError(source, "field 'conversation_history' must be a list", where)
    by_turn: dict[int, list[dict]] = defaultdict(list)
    for k, utterance in enumerate(history_turns):
        at = f"{where}, conversation_history[{k}]"
        if not isinstance(utterance, dict):
            raise DataError(source, f"an utterance must be an object, got {type(utterance).__name__}", at)
        turn = utterance.get("turn", 0)
        if isinstance(turn, bool) or not isinstance(turn, int):
            raise DataError(source, f"field 'turn' must be an integer, got {turn!r}", at)
        if not isinstance(utterance.get("content", ""), str):
            raise DataError(source, f"field 'content' must be a string, got {type(utterance['content']).__name__}", at)
        by_turn[turn].append(utterance)
    return by_turn


def conversation_pairs(conversation: dict, source: str, where: str) -> list[Comparison]:
    """Chosen vs each other response of every rated turn. A turn must mark at most one response chosen,
    and a chosen response must have text (anything else is a DataError naming the turn)."""
    by_turn = _utterances(conversation, source, where)
    user, conv_id = str(conversation.get("user_id", "")), str(conversation.get("conversation_id", ""))
    history: list[tuple[str, str]] = []
    pairs = []
    for turn in sorted(by_turn):
        user_msgs = [u.get("content", "") for u in by_turn[turn] if u.get("role") == "user"]
        models = [u for u in by_turn[turn] if u.get("role") == "model"]
        chosen = [m for m in models if m.get("if_chosen")]
        if len(chosen) > 1:
            raise DataError(source, f"turn {turn} marks {len(chosen)} responses as chosen (if_chosen); one at most",
                            where)
        if chosen and not chosen[0].get("content", "").strip():
            raise DataError(source, f"turn {turn}: the chosen response is empty", where)
        message = user_msgs[0] if user_msgs else ""
        if chosen and message:
            for other in models:
                if other is chosen[0] or not other.get("content"):
                    continue
                pairs.append(Comparison(f"{conv_id}/{turn}/{other.get('within_turn_id', len(pairs))}", user, message,
                                        chosen[0]["content"], other["content"], tuple(history), thread=conv_id))
            history += [("user", message), ("assistant", chosen[0]["content"])]
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
    return PreferenceDataset("prism", "chat", comparisons, notes=notes)
