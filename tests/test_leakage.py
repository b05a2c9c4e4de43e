"""No evaluation text reaches training: Pref-LaMP de-duplication, per-role negatives, group-aware splits."""

import pytest

from persalign.core.config import DataConfig, SplitConfig
from persalign.core.prompts import PromptFormatter
from persalign.core.records import Comparison, PreferenceDataset, UserItem
from persalign.core.registry import DATASETS
from persalign.data.preflamp import build_pref_lamp
from persalign.data.split import make_split
from persalign.data.writing import UserWriting, keep_active_users
from persalign.decoders.args_lambda import validation_pairs
from persalign.models.embedders import HashingBowEmbedder

SPLIT = SplitConfig(adapt_fraction=0.4, support_fraction=0.5, heldout_fraction=0.2, seed=1)
WORDS = "river market council storm school museum airport garden library harvest bakery robot panda".split()


def news_like_writing() -> UserWriting:
    """8 users x 12 items on distinct articles, plus an identical item under two users and a shared headline."""
    items = []
    for u in range(8):
        for i in range(12):
            topic = f"{WORDS[(u + i) % len(WORDS)]} {WORDS[(3 * u + i) % len(WORDS)]} story {u}-{i}"
            items.append(UserItem(f"u{u}-{i}", f"user{u}", f"An article about the {topic}.", f"Headline {u}/{i}"))
    items.append(UserItem("u7-dup", "user7", items[0].input, items[0].output))  # identical (input, output)
    items.append(UserItem("u6-dup", "user6", "A different article about a garden.", items[13].output))
    return UserWriting("news-like", "headline", "<test>", items)


def demo_writing() -> UserWriting:
    return keep_active_users(DATASETS.get("demo")(DataConfig()), DataConfig())


def texts_by_role(dataset, split):
    by_id = {c.id: c for c in dataset.comparisons}
    seen = {"prompts": set(), "outputs": set()}
    for role in ("train", "heldout", "support"):
        for ids in getattr(split, role).values():
            for i in ids:
                seen["prompts"].add(by_id[i].prompt)
                seen["outputs"] |= {by_id[i].chosen, by_id[i].rejected}
    query = [by_id[i] for i in split.query_ids()]
    return seen, query


@pytest.mark.parametrize("make_writing, unique_inputs", [(news_like_writing, True), (demo_writing, False)])
def test_no_query_text_appears_in_any_train_heldout_or_support_pair(make_writing, unique_inputs):
    dataset = build_pref_lamp(make_writing(), HashingBowEmbedder(), SPLIT, top_k=5, seed=0)
    split = make_split(dataset, SPLIT)
    seen, query = texts_by_role(dataset, split)
    assert query
    for pair in query:
        assert pair.chosen not in seen["outputs"], pair.id  # the user's own reference
        assert pair.rejected not in seen["outputs"], pair.id  # its mined negative
        if unique_inputs:  # the demo headlines one article by several authors: shared inputs are by design
            assert pair.prompt not in seen["prompts"], pair.id


def test_identical_items_are_kept_once():
    dataset = build_pref_lamp(news_like_writing(), HashingBowEmbedder(), SPLIT, top_k=5, seed=0)
    ids = {c.id for c in dataset.comparisons}
    assert "u7-dup" not in ids and "u6-dup" not in ids and len(ids) == 96
    assert dataset.notes["duplicate_outputs_dropped"] == 2


def grouped_pairs():
    """PRISM/TL;DR shape: several pairs share one prompt (the other responses of a turn, comparisons of a post)."""
    pairs = []
    for u in range(10):
        for post in range(6):
            prompt = f"post {post % 4 + 4 * (u % 3)}"  # some posts rated by several users, too
            history = (("user", f"earlier {u}"),) if post % 2 else ()
            pairs += [Comparison(f"{u}/{post}/{k}", f"user{u}", prompt, f"best {u}", f"other {k}", history)
                      for k in range(3)]
    return PreferenceDataset("grouped", "chat", pairs)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_no_prompt_is_in_two_sets(seed):
    dataset = grouped_pairs()
    split = make_split(dataset, SplitConfig(adapt_fraction=0.3, heldout_fraction=0.3, seed=seed))
    by_id = {c.id: c for c in dataset.comparisons}
    key = lambda i: (by_id[i].prompt, by_id[i].history)  # noqa: E731
    train = {key(i) for ids in split.train.values() for i in ids}
    heldout = {key(i) for ids in split.heldout.values() for i in ids}
    assert heldout and not train & heldout
    for user in split.adapt_users:
        assert not {key(i) for i in split.support[user]} & {key(i) for i in split.query[user]}


def test_harmonic_rule_references_belong_to_their_own_pairs(tiny_lm):
    dataset = build_pref_lamp(news_like_writing(), HashingBowEmbedder(), SPLIT, top_k=5, seed=0)
    split = make_split(dataset, SPLIT)
    formatter = PromptFormatter(tiny_lm.tokenizer, "headline")
    completions = dataset.completion_by_id()
    val, ids = validation_pairs(dataset, split, formatter, 4)
    assert len(ids) == len(val) == 4
    for chosen, item_id in zip(val.chosen, ids):
        assert formatter.response_ids(completions[item_id].reference) == chosen


def multi_turn_prism(folder):
    """6 users x 4 conversations x 3 rated turns x 3 responses, in PRISM's schema (tests/schema_records.py)."""
    import json

    from tests.schema_records import _prism_turn

    conversations, survey = [], []
    for u in range(6):
        survey.append({"user_id": f"user{u}", "num_completed_conversations": 4, "self_description": "...",
                       "system_string": ""})
        for c in range(4):
            turns = [message for t in range(3) for message in _prism_turn(
                t, f"question {t} of talk {c} by {u}", [(f"answer {r} to {t}/{c}/{u}", 90 - 30 * r) for r in range(3)])]
            conversations.append({"conversation_id": f"c{u}-{c}", "user_id": f"user{u}", "conversation_type": "unguided",
                                  "conversation_turns": 3, "open_feedback": "", "conversation_history": turns})
    folder.mkdir()
    for name, records in (("conversations.jsonl", conversations), ("survey.jsonl", survey)):
        (folder / name).write_text("".join(json.dumps(r) + "\n" for r in records))
    return folder


@pytest.mark.parametrize("seed", range(4))
def test_prism_is_split_by_conversation_so_no_query_turn_is_context_elsewhere(tmp_path, seed):
    """Issue #28: grouped by turn, a query turn's prompt and chosen answer sat in a support pair's history."""
    dataset = DATASETS.get("prism")(DataConfig(dataset="prism", path=str(multi_turn_prism(tmp_path / "prism"))))
    split = make_split(dataset, SplitConfig(adapt_fraction=0.5, support_fraction=0.5, heldout_fraction=0.3, seed=seed))
    by_id = {c.id: c for c in dataset.comparisons}
    query = [by_id[i] for i in split.query_ids()]
    heldout = [by_id[i] for ids in split.heldout.values() for i in ids]
    for role, protected in (("query", query), ("heldout", heldout)):
        texts = {c.prompt for c in protected} | {c.chosen for c in protected}
        others = [by_id[i] for name, sets in split.sets().items() if name != role for ids in sets.values() for i in ids]
        for other in others:
            context = {other.prompt} | {text for _, text in other.history}
            assert not context & texts, (role, other.id, context & texts)
    assert query and heldout
