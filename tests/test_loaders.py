"""Loaders on fixtures written in the official schemas, and their bad-input errors."""

import json

import pytest

from persalign.core.config import DataConfig
from persalign.core.errors import DataError
from persalign.core.registry import DATASETS
from persalign.data.writing import keep_active_users


def load(name, **kwargs):
    return DATASETS.get(name)(DataConfig(dataset=name, **kwargs))


def test_lamp5_profile_and_question_become_user_items(fixtures):
    writing = load("lamp", path=str(fixtures / "lamp5_dev_questions.json"))
    assert writing.name == "LaMP_5" and writing.task == "title"
    by_user = {}
    for item in writing.items:
        by_user.setdefault(item.user, []).append(item)
    assert sorted(by_user) == ["100", "101", "102"]
    assert len(by_user["100"]) == 4  # 3 profile items + the question
    question = next(i for i in by_user["100"] if i.id == "100/question")
    assert question.input == "Query abstract of u1 about learning."  # instruction prefix stripped
    assert question.output == "Query Title of u1"
    assert any(i.output == "Unicode Rewards: A Café Study ☕" for i in by_user["102"])


def test_lamp4_and_lamp7_shapes(fixtures):
    lamp4 = load("lamp", path=str(fixtures / "lamp4_dev_questions.json"))
    assert lamp4.task == "headline"
    park = next(i for i in lamp4.items if i.id == "200/2001")
    assert (park.input, park.output, park.date) == ("A new park opened downtown.", "Park Opens Downtown", "2020-01-01")
    lamp7 = load("lamp", path=str(fixtures / "lamp7_dev_questions.json"))
    style_only = [i for i in lamp7.items if not i.input]
    assert {i.output for i in style_only} == {"coffee first, questions later", "mondays, am i right"}
    assert {i.id for i in lamp7.items if i.input} == {"300/question", "301/question"}  # empty profile is fine


def test_news_category_users_are_authors_and_rows_without_author_are_counted(fixtures):
    writing = load("news_category", path=str(fixtures / "news_small.jsonl"))
    assert {i.user for i in writing.items} == {"Ann Writer", "Bob Reporter", "Cy Editor"}
    assert writing.notes["records_without_author"] == 1
    item = writing.items[0]
    assert item.input.startswith("Report number 0") and item.output == "Election Night Is Here"


def test_min_items_filter_and_cap(fixtures):
    writing = load("news_category", path=str(fixtures / "news_small.jsonl"))
    kept = keep_active_users(writing, DataConfig(min_items_per_user=4, max_items_per_user=2))
    assert kept.notes["users_kept"] == 3
    assert all(sum(1 for i in kept.items if i.user == u) == 2 for u in {"Ann Writer", "Bob Reporter"})
    with pytest.raises(DataError, match="no user has at least min_items_per_user=5"):
        keep_active_users(writing, DataConfig(min_items_per_user=5))


# --- bad input: one clear error naming file, record and problem ---------------------------------

def write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    return path


def test_malformed_jsonl_names_file_and_line(tmp_path):
    good = json.dumps({"headline": "h", "short_description": "d", "authors": "a"})
    path = write(tmp_path, "news.jsonl", good + "\n{not json\n")
    with pytest.raises(DataError) as err:
        load("news_category", path=str(path))
    assert "news.jsonl" in str(err.value) and "line 2" in str(err.value) and "invalid JSON" in str(err.value)


@pytest.mark.parametrize("record,problem", [
    ({"short_description": "d", "authors": "a"}, "field 'headline' is missing"),
    ({"headline": "  ", "short_description": "d", "authors": "a"}, "field 'headline' is empty"),
    ({"headline": "h", "short_description": 3, "authors": "a"}, "field 'short_description' must be a string"),
    ({"headline": "h", "short_description": "d"}, "field 'authors' is missing"),
])
def test_missing_or_empty_fields(tmp_path, record, problem):
    path = write(tmp_path, "news.jsonl", json.dumps(record) + "\n")
    with pytest.raises(DataError, match=f"news.jsonl, record line 1: {problem}"):
        load("news_category", path=str(path))


def test_missing_file_and_unknown_lamp_task(tmp_path):
    with pytest.raises(DataError, match="not found"):
        load("news_category", path=str(tmp_path / "absent.jsonl"))
    write(tmp_path, "dev_questions.json", json.dumps([{"id": "1", "input": "x", "profile": []}]))
    write(tmp_path, "dev_outputs.json", json.dumps({"task": "LaMP_9", "golds": []}))
    with pytest.raises(DataError, match=r"dev_outputs.json: unknown task 'LaMP_9'"):
        load("lamp", path=str(tmp_path / "dev_questions.json"))


def test_lamp_profile_item_missing_title(tmp_path):
    write(tmp_path, "dev_questions.json", json.dumps([{"id": "7", "input": "x", "profile": [{"id": "a", "abstract": "y"}]}]))
    write(tmp_path, "dev_outputs.json", json.dumps({"task": "LaMP_5", "golds": [{"id": "7", "output": "t"}]}))
    with pytest.raises(DataError, match=r"question id 7, profile\[0\]: field 'title' is missing"):
        load("lamp", path=str(tmp_path / "dev_questions.json"))


def test_generic_completions_duplicate_id(tmp_path):
    line = json.dumps({"id": "a", "user": "u", "input": "i", "output": "o"})
    path = write(tmp_path, "mine.jsonl", line + "\n" + line + "\n")
    with pytest.raises(DataError, match="record line 2: duplicate id 'a'"):
        load("completions_jsonl", path=str(path))


def test_unknown_dataset_and_task():
    from persalign.core.errors import ConfigError
    from persalign.core.prompts import task_template

    with pytest.raises(ConfigError, match="unknown dataset 'lamp9'"):
        DATASETS.get("lamp9")
    with pytest.raises(ConfigError, match="unknown task 'poem'"):
        task_template("poem")


@pytest.mark.needs_real_data
def test_real_news_category_file_matches_its_documented_shape():
    from tests.conftest import REAL_NEWS

    writing = load("news_category", path=str(REAL_NEWS))
    assert writing.notes["records"] == 10_000 and writing.notes["records_without_author"] == 821
    kept = keep_active_users(writing, DataConfig(min_items_per_user=20))
    assert kept.notes["users_kept"] == 67 and len(kept.items) == 6525
