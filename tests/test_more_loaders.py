"""TL;DR, PRISM, Personalized RewardBench and generic preference loaders on official-schema fixtures."""

import json
import sys
import types

import pytest

from persalign.core.config import DataConfig
from persalign.core.errors import DataError
from persalign.core.prompts import PromptFormatter
from persalign.core.registry import DATASETS


def load(name, path, **kwargs):
    return DATASETS.get(name)(DataConfig(dataset=name, path=str(path), **kwargs))


def test_tldr_users_are_workers_and_choice_picks_the_chosen_summary(fixtures):
    data = load("tldr", fixtures / "tldr_comparisons.jsonl")
    assert data.task == "summary" and data.users() == ["w1", "w2", "w3"]
    second = data.comparisons[1]  # choice 1
    assert second.chosen.startswith("A much longer") and second.rejected == "Short summary 1"
    assert "SUBREDDIT: r/cats" in second.prompt and "🐱" in second.prompt


def test_tldr_bad_choice_is_reported(tmp_path, fixtures):
    record = json.loads((fixtures / "tldr_comparisons.jsonl").read_text().splitlines()[0])
    record["choice"] = 2
    (tmp_path / "bad.jsonl").write_text(json.dumps(record) + "\n")
    with pytest.raises(DataError, match=r"bad.jsonl, record line 1: field 'choice' must be 0 or 1"):
        load("tldr", tmp_path / "bad.jsonl")


def test_hub_loading_goes_through_datasets_load_dataset(monkeypatch, fixtures):
    rows = [json.loads(line) for line in (fixtures / "tldr_comparisons.jsonl").read_text().splitlines()]
    calls = []

    def fake_load_dataset(name, config=None, split=None):
        calls.append((name, config, split))
        return rows

    monkeypatch.setitem(sys.modules, "datasets", types.SimpleNamespace(load_dataset=fake_load_dataset))
    data = load("tldr", "hf:openai/summarize_from_feedback@validation")
    assert calls == [("openai/summarize_from_feedback", "comparisons", "validation")]
    assert len(data.comparisons) == 5


def test_prism_pairs_context_and_dropped_users(tiny_lm, fixtures):
    data = load("prism", fixtures / "prism")
    ids = [c.id for c in data.comparisons]
    assert ids == ["c0/0/1", "c0/0/2", "c0/1/1", "c3/0/1"]  # the one-response turn gives no pair
    joke = data.comparisons[2]
    assert joke.chosen.startswith("Why did") and joke.rejected == "No."
    assert joke.history == (("user", "Hello, ¿qué tal?"), ("assistant", "Fine, thanks!"))
    assert data.notes["users_without_pairs"] == 1 and data.notes["conversations_of_unknown_users"] == 1
    text = tiny_lm.tokenizer.decode(PromptFormatter(tiny_lm.tokenizer, "chat").prompt_ids(joke.prompt, history=joke.history))
    assert text.index("¿qué tal?") < text.index("Fine, thanks!") < text.index("Tell me a joke.")


def test_personalized_rewardbench_keeps_profile_and_never_the_rubric(fixtures):
    data = load("personalized_rewardbench", fixtures / "personalized_rewardbench.jsonl")
    assert len(data.comparisons) == 2 and len(data.users()) == 1  # the same profile is the same user
    assert data.notes["records_with_empty_profile_dropped"] == 1  # never a phantom user
    shown = json.dumps([c.__dict__ for c in data.comparisons]) + json.dumps(
        [[i.__dict__ for i in items] for items in data.profiles.values()])
    assert "SECRET" not in shown
    first_user = data.comparisons[0].user
    assert {i.output for i in data.profiles[first_user]} == {"I love spicy ramen", "Trips to Kyoto"}


def test_generic_preferences_with_optional_reference(tmp_path):
    lines = [{"user": "u", "prompt": "p", "chosen": "a", "rejected": "b", "reference": "my text"},
             {"user": "v", "prompt": "q", "chosen": "c", "rejected": "d"}]
    (tmp_path / "prefs.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    data = load("preferences_jsonl", tmp_path / "prefs.jsonl")
    assert len(data.comparisons) == 2 and [c.reference for c in data.completions] == ["my text"]
    (tmp_path / "bad.jsonl").write_text(json.dumps({"user": "u", "prompt": "p", "chosen": "a"}) + "\n")
    with pytest.raises(DataError, match="record line 1: field 'rejected' is missing"):
        load("preferences_jsonl", tmp_path / "bad.jsonl")
