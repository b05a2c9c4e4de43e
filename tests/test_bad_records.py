"""Malformed data records: every one is one line naming the file, the record and the problem.

Split from the bad-input suite (issues #15, #29); run: pytest tests/test_bad_records.py
"""

import json
import shutil

import pytest

from persalign import cli
from tests.bad_input_helpers import cli_error, jsonl_bytes


def completion(i, **extra):
    return {"user": f"u{i % 2}", "input": f"article {i}", "output": f"headline {i}", **extra}


def prism_folder(tmp_path, mutate):
    from tests.schema_records import prism_conversations, prism_survey

    folder = tmp_path / "prism"
    folder.mkdir()
    conversations = prism_conversations()
    mutate(conversations[0]["conversation_history"])
    (folder / "conversations.jsonl").write_bytes(jsonl_bytes(conversations))
    (folder / "survey.jsonl").write_bytes(jsonl_bytes(prism_survey()))
    return folder, folder / "conversations.jsonl"


def _two_chosen(history):
    history[2]["if_chosen"] = True


def _empty_chosen(history):
    history[1]["content"] = ""


def _utterance_not_object(history):
    history[1] = "just a string"


def _turn_not_int(history):
    history[1]["turn"] = "first"


LOADER_CASES = {
    "non_utf8": ("completions_jsonl", jsonl_bytes([completion(0)]) + b'{"user": "\xff"}\n',
                 "record line 2: not UTF-8 text (byte 0xff at byte offset 71 of the file)"),
    "date_not_string": ("completions_jsonl", jsonl_bytes([completion(0, date=20240101)]),
                        "record line 1: field 'date' must be a string, got int"),
    "id_is_a_list": ("completions_jsonl", jsonl_bytes([completion(0, id=["a", "b"])]),
                     "record line 1: field 'id' must be a string or an integer, got list"),
    "authors_is_a_list": ("news_category", jsonl_bytes([{"authors": ["A", "B"], "headline": "h",
                                                         "short_description": "d"}]),
                          "record line 1: field 'authors' must be a string, got list"),
    "rewardbench_duplicate_id": ("personalized_rewardbench", jsonl_bytes(
        [{"id": "x", "question": f"q{i}", "chosen": "a", "rejected": "b", "profile": [{"id": "p", "text": "t"}]}
         for i in range(2)]), "record line 2: duplicate id 'x' (first at line 1)"),
    "tldr_duplicate_comparison": ("tldr", None, "record line 2: duplicate comparison 'worker w1, post t3_0, summaries"),
    "lamp_duplicate_question": ("lamp", None, "record question 1: duplicate question id '100' (first at question 0)"),
}


@pytest.mark.parametrize("case", sorted(LOADER_CASES))
def test_loader_errors_name_file_record_and_problem(tmp_path, capsys, fixtures, case):
    dataset, content, message = LOADER_CASES[case]
    if dataset == "tldr":
        from tests.schema_records import tldr_comparisons

        first = tldr_comparisons()[0]
        content = jsonl_bytes([first, first])
    path = tmp_path / "data.jsonl"
    if dataset == "lamp":
        questions = json.loads((fixtures / "lamp5_dev_questions.json").read_text())
        questions[1]["id"] = questions[0]["id"] = "100"
        path = tmp_path / "dev_questions.json"
        path.write_text(json.dumps(questions))
        shutil.copy(fixtures / "lamp5_dev_outputs.json", tmp_path / "dev_outputs.json")
    else:
        path.write_bytes(content)
    task = ["data.task=headline"] if dataset.endswith("_jsonl") else []  # your own data states its task
    line = cli_error(capsys, ["data", "summary", "demo-baselines", f"data.dataset={dataset}", f"data.path={path}",
                              "data.max_items_per_user=5", "data.embedder=hashing-bow"] + task)
    assert line.startswith(f"persalign: error: {path}, {message}"), line


@pytest.mark.parametrize("mutate, message", [
    (_two_chosen, "turn 0 marks 2 responses as chosen (if_chosen); one at most"),
    (_empty_chosen, "turn 0: the chosen response is empty"),
    (_utterance_not_object, "an utterance must be an object, got str"),
    (_turn_not_int, "field 'turn' must be an integer, got 'first'"),
])
def test_prism_turns_of_the_wrong_shape_are_named(tmp_path, capsys, mutate, message):
    folder, conversations = prism_folder(tmp_path, mutate)
    line = cli_error(capsys, ["data", "summary", "demo-baselines", "data.dataset=prism", f"data.path={folder}"])
    assert line.startswith(f"persalign: error: {conversations}, record line 1") and line.endswith(message), line


def test_identical_chosen_and_rejected_are_dropped_and_reported(tmp_path, capsys):
    records = [{"user": f"u{i % 4}", "prompt": f"p{i}", "chosen": f"c{i}", "rejected": f"r{i}"} for i in range(24)]
    records[3]["rejected"] = records[3]["chosen"]
    path = tmp_path / "pairs.jsonl"
    path.write_bytes(jsonl_bytes(records))
    assert cli.main(["data", "summary", "demo-baselines", "data.dataset=preferences_jsonl", "data.task=chat", f"data.path={path}"]) == 0
    assert "pairs_with_chosen_equal_to_rejected_dropped=1" in capsys.readouterr().out
